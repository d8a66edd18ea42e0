"""A file for signal-cli's ``send``: the bytes as an RFC 2397 data URI carrying the
file's name (``data:<type>;filename=<name>;base64,<data>``, the form signal-cli's
``--attachment`` documents), since the daemon may run on another machine than the
gateway and a path would name a file it cannot see."""

from __future__ import annotations

import base64
from urllib.parse import quote

from channels.outfiles import MB, check_size, mime_of
from channels.signal.render import SIGNAL_TEXT_LIMIT

#: Signal's attachment cap, as its apps state it ("files up to 100 MB")
ATTACHMENT_MAX = 100 * MB


def data_uri(data: bytes, name: str) -> str:
    """The attachment value for ``data`` shown as ``name``; ``PermanentError`` past
    Signal's cap."""
    check_size(len(data), ATTACHMENT_MAX, "Signal attachments")
    # signal-cli URL-decodes parameters (``DataURI``: "must be URL escaped encoded");
    # a ";", "," or "+" left bare would end the parameter or turn into a space
    filename = quote(name, safe="")
    return (f"data:{mime_of(name)};filename={filename};base64,"
            f"{base64.b64encode(data).decode('ascii')}")


def fit_caption(caption: str) -> str:
    """The caption cut to signal-cli's 2000-byte body (a longer one would go as a
    long-text attachment of its own), on a character boundary."""
    return caption.encode("utf-8")[:SIGNAL_TEXT_LIMIT].decode("utf-8", "ignore")
