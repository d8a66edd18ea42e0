"""What every adapter's ``send_file`` needs beside its platform call: the file's type
from its name, and a size cap refused in words the chat can read (the outbox puts a
``PermanentError``'s reason into the note it sends instead, ``gateway/outgoing/_filesend.py``)."""

from __future__ import annotations

import mimetypes

from channels.errors import PermanentError

MB = 1_000_000  # platforms state their caps in decimal megabytes
OCTET_STREAM = "application/octet-stream"


def mime_of(name: str) -> str:
    """The MIME type a file called ``name`` travels as (by extension)."""
    return mimetypes.guess_type(name, strict=False)[0] or OCTET_STREAM


def check_size(size: int, cap: int, what: str) -> None:
    """``PermanentError`` when ``size`` bytes exceed ``cap``; ``what`` names the cap's
    holder as the note shows it ("WhatsApp documents")."""
    if size > cap:
        raise PermanentError(f"it is {size / MB:.1f} MB and {what} may be at most "
                             f"{cap / MB:g} MB")
