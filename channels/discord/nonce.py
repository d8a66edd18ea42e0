"""The nonce a reply chunk is sent with, so Discord itself sends it at most once.

Discord's Create Message takes ``nonce`` (an integer or a string of up to 25
characters) and ``enforce_nonce``: "if true and nonce is present, it will be checked for
uniqueness in the past few minutes. If another message was created by the same author
with the same nonce, that message will be returned and no new message will be created."
(developer docs, Message resource, Create Message). discord.py's ``send(nonce=...)``
always sets ``enforce_nonce``.
"""

from __future__ import annotations

import hashlib

#: the longest string nonce Discord accepts
MAX_NONCE_LEN = 25


def send_nonce(reply_id: str, index: int) -> str:
    """Same reply id and chunk index, same nonce, on any gateway; 100 bits of a hash, so
    two chunks never share one by accident."""
    digest = hashlib.sha256(f"{reply_id}:{index}".encode()).hexdigest()
    return digest[:MAX_NONCE_LEN]
