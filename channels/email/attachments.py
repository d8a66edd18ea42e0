"""Email attachments, fetched from the IMAP server when they are needed (issue 28).

The bytes are in the mail, and the mail stays on the server (the adapter never deletes
or moves received mail), so the adapter keeps no copy: an attachment's id names where it
is, ``<UIDVALIDITY>:<UID>/<IMAP section>`` (RFC 3501: the UID is valid for as long as the
folder's UIDVALIDITY is; the section is the part's place in the MIME tree, e.g. "2" or
"1.2"). ``fetch`` selects the folder, checks UIDVALIDITY, reads the part's MIME header
(``BODY.PEEK[<section>.MIME]``) for its transfer encoding, then at most as many octets
of the encoded part as a file of the cap can take in that encoding (a partial FETCH,
``BODY.PEEK[<section>]<0.N>``: the server sends no more), and decodes them. A mail
deleted or moved since, or a recreated folder, is ``PermanentError("attachment gone")``.
"""

from __future__ import annotations

import binascii
import email.policy
import quopri
import re
from collections.abc import Callable
from email.parser import BytesHeaderParser

from channels.email.imap import ImapSession
from channels.errors import AttachmentTooLarge, PermanentError
from channels.models import Attachment

_ID = re.compile(r"(\d+):(\d+)/(\d+(?:\.\d+)*)")


def part_prefix(uidvalidity: int, uid: int) -> str:
    """What starts the ids of one mail's attachments."""
    return f"{uidvalidity}:{uid}/"


def encoded_limit(max_bytes: int, encoding: str) -> int:
    """The most octets a part of ``max_bytes`` decoded bytes has in ``encoding``:
    base64 is 4/3 plus a CRLF per 76 characters (RFC 2045 6.8); quoted-printable is at
    worst 3 octets a byte plus a soft line break ("=" CRLF) per 73; else 1:1."""
    if encoding == "base64":
        chars = 4 * -(-max_bytes // 3)
        return chars + 2 * (chars // 76 + 1)
    if encoding == "quoted-printable":
        return 3 * max_bytes + 3 * (3 * max_bytes // 73 + 1)
    return max_bytes


def _decode(data: bytes, encoding: str) -> bytes:
    if encoding == "base64":
        try:
            return binascii.a2b_base64(data)  # skips line breaks and stray characters
        except binascii.Error:
            raise PermanentError("attachment corrupt", "bad base64 in the part") from None
    if encoding == "quoted-printable":
        return quopri.decodestring(data)
    return data


async def fetch(session_factory: Callable[[], ImapSession], folder: str,
                attachment: Attachment, max_bytes: int) -> bytes:
    """The decoded bytes of ``attachment`` (see the module doc)."""
    found = _ID.fullmatch(attachment.id)
    if found is None:
        raise PermanentError("not downloadable", "not an IMAP attachment id")
    uidvalidity, uid, section = int(found.group(1)), int(found.group(2)), found.group(3)
    AttachmentTooLarge.check(attachment.size, max_bytes)
    async with session_factory() as session:
        selected = await session.select(folder)
        if selected.uidvalidity != uidvalidity:
            raise PermanentError("attachment gone", "the folder was recreated since")
        header = await session.body(uid, f"{section}.MIME")
        if header is None:
            raise PermanentError("attachment gone", "the mail is no longer in the folder")
        parsed = BytesHeaderParser(policy=email.policy.default).parsebytes(header)
        encoding = str(parsed.get("Content-Transfer-Encoding", "7bit")).strip().lower()
        limit = encoded_limit(max_bytes, encoding)
        data = await session.body(uid, section, octets=limit + 1)
    if data is None:
        raise PermanentError("attachment gone", "the mail is no longer in the folder")
    if len(data) > limit:
        raise AttachmentTooLarge(max_bytes)
    decoded = _decode(data, encoding)
    AttachmentTooLarge.check(len(decoded), max_bytes)
    return decoded
