"""Matrix media: where an ``m.image``/``m.audio``/``m.video``/``m.file`` lives, and its
download (issue 28).

A plain event names its file by ``content.url`` (an ``mxc://<server>/<media id>`` URI); an
event in an encrypted room by ``content.file`` (spec "Sending encrypted attachments":
``url``, ``key`` (an A256CTR JWK; ``k`` is the key), ``iv``, ``hashes.sha256``, ``v``),
the file on the server being ciphertext. ``attachment_url`` keeps that as the
attachment's ``url``: the ``mxc://`` URI, plus, for encrypted media, the key, IV and hash
in its fragment (``#k=...&iv=...&sha256=...``), since the download happens later, from the
durable message, and needs them to decrypt. A fragment is never sent to a server.

The download uses the authenticated media API (``GET /_matrix/client/v1/media/download/
<server>/<media id>`` with the bot's access token, spec v1.11; Synapse serves new media
only there), reads at most the cap (``Content-Length`` first, then counting), and for
encrypted media checks the SHA-256 of the ciphertext and decrypts with
``nio.crypto.attachments.decrypt_attachment``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

import aiohttp

from channels.download import read_capped
from channels.errors import AttachmentTooLarge, NetworkError, PermanentError, TransientError
from channels.matrix.errors import NETWORK_ERRORS
from channels.models import Attachment

DOWNLOAD_PATH = "/_matrix/client/v1/media/download"
#: seconds one download may take, connect to last byte
DOWNLOAD_TIMEOUT = 120.0


def attachment_url(content: dict[str, Any]) -> str | None:
    """The ``url`` of the attachment an event's content describes (see the module doc)."""
    file = content.get("file")
    if isinstance(file, dict) and isinstance(file.get("url"), str):
        key, hashes = file.get("key"), file.get("hashes")
        key = key if isinstance(key, dict) else {}
        hashes = hashes if isinstance(hashes, dict) else {}
        secret = {"k": key.get("k"), "iv": file.get("iv"), "sha256": hashes.get("sha256")}
        if all(isinstance(v, str) and v for v in secret.values()):
            return f"{file['url']}#{urlencode(secret)}"
        return None  # encrypted without its key: nothing we could read
    url = content.get("url")
    return url if isinstance(url, str) and url else None


def _split_mxc(url: str) -> tuple[str, str, dict[str, str]]:
    """(server, media id, decryption fields) of an attachment url."""
    uri, _, fragment = url.partition("#")
    if not uri.startswith("mxc://"):
        raise PermanentError("not downloadable", "not an mxc:// URI")
    server, _, media_id = uri[len("mxc://"):].partition("/")
    if not server or not media_id or "/" in media_id:
        raise PermanentError("not downloadable", "a malformed mxc:// URI")
    return server, media_id, dict(parse_qsl(fragment))


async def download(homeserver: str, access_token: str, attachment: Attachment,
                   max_bytes: int) -> bytes:
    """The (decrypted) bytes of ``attachment``; see ``Channel.fetch_attachment``."""
    if not attachment.url:
        raise PermanentError("not downloadable", "the event names no file")
    AttachmentTooLarge.check(attachment.size, max_bytes)
    server, media_id, secret = _split_mxc(attachment.url)
    url = (f"{homeserver.rstrip('/')}{DOWNLOAD_PATH}/{quote(server, safe='')}/"
           f"{quote(media_id, safe='')}")
    headers = {"Authorization": f"Bearer {access_token}"}
    timeout = aiohttp.ClientTimeout(total=DOWNLOAD_TIMEOUT)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session, \
                session.get(url, headers=headers) as resp:
            if resp.status == 404:
                raise PermanentError("attachment gone", "the homeserver has no such media")
            if resp.status == 429 or resp.status >= 500:
                raise TransientError(f"the homeserver answered HTTP {resp.status}")
            if resp.status >= 400:
                raise PermanentError("download refused",
                                     f"the homeserver answered HTTP {resp.status}")
            AttachmentTooLarge.check(resp.content_length, max_bytes)  # before a byte is read
            data = await read_capped(resp.content.iter_chunked(64 * 1024), max_bytes)
    except NETWORK_ERRORS as error:
        raise NetworkError(f"matrix media download failed ({type(error).__name__})") from None
    if not secret:
        return data
    from nio.crypto.attachments import decrypt_attachment
    from nio.exceptions import EncryptionError

    try:
        plain: bytes = decrypt_attachment(data, secret.get("k", ""), secret.get("sha256", ""),
                                          secret.get("iv", ""))
    except EncryptionError:
        # the hash is checked on the ciphertext first: a tampered or truncated file
        raise PermanentError("attachment corrupt", "the encrypted file failed its check"
                             ) from None
    return plain
