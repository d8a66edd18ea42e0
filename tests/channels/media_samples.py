"""Files the media tests send through each channel's fake or real server: a voice note,
an image and a document, each with its format's magic bytes and deterministic content
(so a byte-for-byte comparison shows the adapter fetched exactly this file)."""

from __future__ import annotations

import random

#: an Ogg/Opus voice note's first page header, then "audio"
VOICE = b"OggS\x00\x02" + b"\x00" * 20 + b"OpusHead" + random.Random(1).randbytes(30_000)
#: a PNG signature and IHDR chunk start, then "pixels"
IMAGE = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + random.Random(2).randbytes(50_000)
#: a PDF header, then "pages"
DOCUMENT = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n" + random.Random(3).randbytes(70_000)
#: the cap the tests fetch with: every sample above is under it
CAP = 100_000


def oversized(size: int = 8 * 1024 * 1024) -> bytes:
    """A file well past ``CAP`` (and past what socket buffers hold in flight)."""
    return random.Random(4).randbytes(size)
