"""What a received file is, decided from its bytes, never from its name or the
platform's claim.

``puremagic`` (pure Python, no libmagic needed, already in the environment) reads the
magic numbers; its guesses are mapped onto the few types we keep (``KNOWN``), so a
loose match such as ``.fdf`` never names a type. Text has no magic number: bytes that
decode as UTF-8 without a NUL are ``text/plain``. Images are then opened with Pillow,
which reads the header only: more pixels than ``Image.MAX_IMAGE_PIXELS`` is refused as
a decompression bomb before anything is decoded.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import puremagic
from PIL import Image

#: puremagic's extension -> (canonical mime, extension we store, kind)
KNOWN: dict[str, tuple[str, str, str]] = {
    ".png": ("image/png", "png", "image"),
    ".jpg": ("image/jpeg", "jpg", "image"),
    ".jpeg": ("image/jpeg", "jpg", "image"),
    ".jfif": ("image/jpeg", "jpg", "image"),
    ".jpe": ("image/jpeg", "jpg", "image"),
    ".gif": ("image/gif", "gif", "image"),
    ".webp": ("image/webp", "webp", "image"),
    ".ogg": ("audio/ogg", "ogg", "audio"),
    ".oga": ("audio/ogg", "ogg", "audio"),
    ".opus": ("audio/ogg", "ogg", "audio"),
    ".mp3": ("audio/mpeg", "mp3", "audio"),
    ".m4a": ("audio/mp4", "m4a", "audio"),
    ".wav": ("audio/wav", "wav", "audio"),
    ".mp4": ("video/mp4", "mp4", "video"),
    ".pdf": ("application/pdf", "pdf", "document"),
}
TEXT = ("text/plain", "txt", "document")
#: bytes read to decide whether an unknown file is text
TEXT_PROBE = 64 * 1024


@dataclass(frozen=True)
class Sniffed:
    mime: str
    ext: str
    kind: str  # "image", "audio", "video", "document"
    width: int = 0
    height: int = 0


class Refused(Exception):
    """The bytes are of no type we keep, or an image too big to decode safely. The
    message is short and safe to show the sender."""


def sniff(data: bytes) -> Sniffed:
    """The type of ``data``; raises ``Refused`` for an unknown type or an image bomb."""
    found = _magic(data)
    if found is None:
        raise Refused("a file type I don't accept")
    mime, ext, kind = found
    if kind == "image":
        width, height = image_size(data)
        return Sniffed(mime, ext, kind, width, height)
    return Sniffed(mime, ext, kind)


def _magic(data: bytes) -> tuple[str, str, str] | None:
    try:
        matches = puremagic.magic_string(data)
    except (puremagic.PureError, ValueError):
        matches = []
    for match in matches:
        known = KNOWN.get(match.extension.lower())
        if known is not None:
            return known
    if not matches and _is_text(data[:TEXT_PROBE]):
        return TEXT
    return None


def _is_text(head: bytes) -> bool:
    if not head or b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        # the probe may cut a multi-byte character in two at its end
        return err.start >= len(head) - 3 and err.reason == "unexpected end of data"
    return True


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the image's header, without decoding its pixels. Raises
    ``Refused`` for more than ``Image.MAX_IMAGE_PIXELS`` pixels (Pillow's own bomb
    limit) or a header Pillow cannot read."""
    limit = Image.MAX_IMAGE_PIXELS
    try:
        with warnings.catch_warnings():
            # Pillow warns between 1x and 2x its limit and raises past 2x: both refuse
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as im:  # reads the header only
                width, height = im.size
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise Refused("an image too large to open") from None
    except (OSError, SyntaxError, ValueError):
        raise Refused("an image I cannot read") from None
    if limit is not None and width * height > limit:
        raise Refused("an image too large to open")
    return width, height
