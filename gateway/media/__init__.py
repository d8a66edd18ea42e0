"""Received files on the gateway side: what they are (``sniff``: from the bytes, with an
image bomb check), where they go (``store``: the group's ``attachments/`` by content
hash, with a sidecar) and the download job that fetches them after the ack
(``downloads``)."""

from __future__ import annotations

from gateway.media.sniff import Refused, sniff
from gateway.media.store import Received, Stored, put, used_bytes

__all__ = ["Received", "Refused", "Stored", "put", "sniff", "used_bytes"]
