"""Files made in the tests: small real images and documents, and a PNG bomb."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image


def png(width: int = 4, height: int = 3, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, format="PNG")
    return out.getvalue()


def pdf() -> bytes:
    return (b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n"
            b"2 0 obj << /Type /Pages /Kids [] /Count 0 >> endobj\n"
            b"trailer << /Root 1 0 R >>\n%%EOF\n")


def exe() -> bytes:
    """A Windows executable's header: a type no allowlist keeps."""
    return b"MZ\x90\x00\x03\x00\x00\x00\x04\x00\x00\x00\xff\xff\x00\x00" + b"\x00" * 112


def _chunk(kind: bytes, body: bytes) -> bytes:
    return (struct.pack(">I", len(body)) + kind + body
            + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))


def png_bomb(side: int = 50_000) -> bytes:
    """A valid PNG header claiming ``side`` x ``side`` 1-bit grey pixels, with a small
    compressed body (a few rows of zeros: decoding it all would need gigabytes)."""
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    rows = zlib.compress(b"\x00" * (1 + side // 8) * 64, 9)
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", rows)
            + _chunk(b"IEND", b""))
