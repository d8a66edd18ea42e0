"""Downloading a received attachment from signal-cli (issue 28).

signal-cli downloads a message's attachments itself when it receives the message (unless
the daemon runs with ``--ignore-attachments``) and serves them with the JSON-RPC method
``getAttachment`` (``GetAttachmentCommand``; ``man/signal-cli.1``): params ``id`` (the
attachment's ``id`` from the receive event), answer ``{"data": "<base64>"}``; an unknown
id is a user error ("Could not find attachment with ID: ..."). There is no ranged or
streamed read, so the cap is kept twice: the size the receive event announced is checked
before asking, and the answer is read at most to the length a file of ``max_bytes`` has
in base64, so a file bigger than announced is never read to its end either.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from typing import Any

from channels.errors import AttachmentTooLarge, PermanentError, TransientError
from channels.models import Attachment
from channels.signal.errors import USER_ERROR
from channels.signal.rpc import RpcError

#: what a JSON-RPC answer holds besides the base64 text: {"jsonrpc", "result": {"data"},
#: "id"}; generous, so the cap is on the file, not on the envelope
ENVELOPE_BYTES = 1024

Call = Callable[..., Awaitable[Any]]


def answer_limit(max_bytes: int) -> int:
    """The longest answer a file of ``max_bytes`` bytes comes in (base64 is 4/3)."""
    return 4 * -(-max_bytes // 3) + ENVELOPE_BYTES


async def fetch(call: Call, attachment: Attachment, max_bytes: int) -> bytes:
    """The bytes of ``attachment`` through ``call`` (``SignalRpc.call``)."""
    if attachment.type == "sticker" or not attachment.id:
        raise PermanentError("not downloadable", "a sticker is not an attachment")
    AttachmentTooLarge.check(attachment.size, max_bytes)
    try:
        result = await call("getAttachment", {"id": attachment.id},
                            max_answer=answer_limit(max_bytes))
    except AttachmentTooLarge:  # the answer's cap, in base64: name the file's
        raise AttachmentTooLarge(max_bytes) from None
    except RpcError as error:
        if error.code == USER_ERROR:  # unknown id: never received, or deleted since
            raise PermanentError("attachment gone", error.message) from None
        raise TransientError(f"signal-cli error {error.code}") from None
    data = result.get("data") if isinstance(result, dict) else None
    if not isinstance(data, str):
        raise TransientError("signal-cli answered getAttachment without data")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise TransientError("signal-cli answered getAttachment with bad base64") from None
    AttachmentTooLarge.check(len(raw), max_bytes)
    return raw
