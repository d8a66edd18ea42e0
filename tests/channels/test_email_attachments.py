"""Email attachments fetched from a real dovecot (issue 28): the adapter keeps no copy;
an attachment's id names its mail and MIME part (``<UIDVALIDITY>:<UID>/<section>``) and
``fetch_attachment`` reads that part over IMAP, decoded, byte for byte; a part over the
cap is refused from its announced size, or read only up to what the cap can take."""

from __future__ import annotations

from email.message import EmailMessage

import pytest

from channels.email.attachments import encoded_limit
from channels.errors import AttachmentTooLarge, PermanentError
from tests.channels.harness_email import BOT, append, started_channel
from tests.channels.media_samples import CAP, DOCUMENT, IMAGE, VOICE, oversized
from tests.channels.tcp_relay import TcpRelay
from tests.fakes import dovecot
from tests.fakes.smtp_server import AUTHSERV_ID

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(dovecot.should_skip(), reason=dovecot.SKIP_REASON),
]

NOTES = "Agenda: caf\u00e9 at 10, budget = 12 \u20ac\n" * 40


def mail(message_id: str) -> EmailMessage:
    msg = EmailMessage()
    msg["Authentication-Results"] = f"{AUTHSERV_ID}; dmarc=pass header.from=example.org"
    msg["From"], msg["To"] = "Ada <ada@example.org>", BOT
    msg["Subject"], msg["Message-ID"] = "files", f"<{message_id}>"
    msg.set_content("Here are the files.")
    return msg


async def test_voice_image_and_documents_are_fetched_part_by_part() -> None:
    msg = mail("files-1@example.org")
    # the image inline in the HTML (multipart/related inside multipart/alternative): a
    # nested section; the others attached; one text document quoted-printable
    msg.add_alternative('<p>Here are the files. <img src="cid:chart"></p>', subtype="html")
    msg.get_payload()[1].add_related(IMAGE, "image", "png", cid="<chart>",
                                     filename="chart.png")
    msg.add_attachment(VOICE, "audio", "ogg", filename="voice-note.ogg")
    msg.add_attachment(DOCUMENT, "application", "pdf", filename="minutes.pdf")
    msg.add_attachment(NOTES, subtype="plain", filename="notes.txt", cte="quoted-printable")
    expected = {"chart.png": IMAGE, "voice-note.ogg": VOICE, "minutes.pdf": DOCUMENT,
                # a text part travels in canonical form: CRLF line ends (RFC 2046 4.1.1)
                "notes.txt": NOTES.replace("\n", "\r\n").encode()}
    async with started_channel() as h:
        uid = await append(h.admin, msg.as_bytes())
        [inbound] = await h.sink.wait_for(1)
        got = {a.name: a for a in inbound.attachments}
        assert set(got) == set(expected)
        assert [got[n].type for n in ("chart.png", "voice-note.ogg", "minutes.pdf")] == [
            "image", "audio", "document"]
        assert got["chart.png"].id.endswith(f":{uid}/1.2.2")  # UIDVALIDITY:UID/section
        for name, attachment in got.items():
            data = await h.channel.fetch_attachment(attachment, CAP)
            assert data == expected[name], name
            assert len(data) == attachment.size, name  # the size announced on receipt
        # a mail that is nothing but the file: its body is section 1
        single = mail("single-1@example.org")
        single.set_content(DOCUMENT, "application", "pdf", filename="only.pdf")
        uid = await append(h.admin, single.as_bytes())
        [attachment] = (await h.sink.wait_for(2))[1].attachments
        assert attachment.id.endswith(f":{uid}/1")
        assert await h.channel.fetch_attachment(attachment, CAP) == DOCUMENT


async def test_a_part_over_the_cap_stops_early_and_a_deleted_mail_is_gone() -> None:
    msg = mail("big-1@example.org")
    msg.add_attachment(oversized(CAP * 10), "application", "zip", filename="big.zip")
    # the IMAP connections go through a relay that counts what dovecot sends on each
    relay = await TcpRelay(dovecot.shared().imap_port).start()
    try:
        async with started_channel({"imap_port": relay.port}) as h:
            uid = await append(h.admin, msg.as_bytes())
            [inbound] = await h.sink.wait_for(1)
            [attachment] = inbound.attachments
            assert attachment.size == CAP * 10
            before = len(relay.downstream)
            with pytest.raises(AttachmentTooLarge):  # by its size: the server is not asked
                await h.channel.fetch_attachment(attachment, CAP)
            assert len(relay.downstream) == before  # no connection was opened
            unsized = attachment.model_copy(update={"size": None})
            with pytest.raises(AttachmentTooLarge):  # by a partial FETCH of the cap's length
                await h.channel.fetch_attachment(unsized, CAP)
            [took] = relay.downstream[before:]  # the fetch's own connection
            assert took < 2 * CAP < CAP * 10  # dovecot sent about the cap, not the 1.3 MB part
            assert len(await h.channel.fetch_attachment(unsized, CAP * 10)) == CAP * 10
            assert encoded_limit(CAP, "base64") < CAP * 10
            # the mail deleted on the server: its attachment is gone for good
            assert (await h.admin.select("INBOX")).result == "OK"
            assert (await h.admin.uid("store", str(uid), "+FLAGS", "(\\Deleted)")).result == "OK"
            assert (await h.admin.expunge()).result == "OK"
            with pytest.raises(PermanentError, match="gone"):
                await h.channel.fetch_attachment(unsized, CAP)
    finally:
        await relay.stop()
