"""Files to WhatsApp: the bytes uploaded to the Cloud API's media endpoint, then one
image or document message naming the media (pywa does both in one ``send_*`` call).

Which message carries a file follows the Cloud API's "supported media types": JPEG and
PNG up to 5 MB go as an image (shown inline; WhatsApp recompresses it); PDF, text and
Office files up to 100 MB as a document (the file as it is, with its name); other types
the API refuses, so the chat gets the outbox's note naming what WhatsApp takes.
"""

from __future__ import annotations

from functools import partial

from pywa_async.client import WhatsApp

from channels.errors import PermanentError, mapped
from channels.outfiles import MB, check_size, mime_of
from channels.whatsapp.errors import map_error

#: developers.facebook.com/docs/whatsapp/cloud-api/reference/media#supported-media-types
IMAGE_TYPES = frozenset({"image/jpeg", "image/png"})
IMAGE_MAX = 5 * MB
DOCUMENT_TYPES = frozenset({
    "text/plain", "application/pdf", "application/msword", "application/vnd.ms-excel",
    "application/vnd.ms-powerpoint",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation",
})
DOCUMENT_MAX = 100 * MB
#: a media message's caption, characters (Cloud API messages reference)
MAX_CAPTION = 1024


async def send_media(wa: WhatsApp, to: str, data: bytes, name: str, caption: str, *,
                     reply_to: str | None, tracker: str) -> str:
    """Upload ``data`` and send it to ``to`` as an image or a document; return the
    wamid. ``PermanentError`` for a type or size WhatsApp does not take."""
    mime = mime_of(name)
    kind = "image" if mime in IMAGE_TYPES and len(data) <= IMAGE_MAX else "document"
    if kind == "document" and mime not in DOCUMENT_TYPES | IMAGE_TYPES:
        raise PermanentError(f"WhatsApp takes PDF, text and Office documents and JPEG or "
                             f"PNG images, not {mime}")
    check_size(len(data), DOCUMENT_MAX, "WhatsApp documents")
    with mapped(Exception, partial(map_error, f"send {kind}")):
        if kind == "image":
            sent = await wa.send_image(to=to, image=data, caption=caption[:MAX_CAPTION] or None,
                                       mime_type=mime, reply_to_message_id=reply_to,
                                       tracker=tracker)
        else:
            sent = await wa.send_document(to=to, document=data, filename=name,
                                          caption=caption[:MAX_CAPTION] or None,
                                          mime_type=mime, reply_to_message_id=reply_to,
                                          tracker=tracker)
    return sent.id
