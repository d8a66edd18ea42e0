"""Email files end to end against a REAL dovecot: mail APPENDed to the bot's INBOX ->
EmailChannel (IMAP IDLE) -> gateway (hold, media job: each part fetched over IMAP
through a relay that records what the bot asks for) -> a real worker whose scripted
model takes images -> replies through the fake submission server."""

from __future__ import annotations

import contextlib
import hashlib
import re
from email.message import EmailMessage
from pathlib import Path

import pytest

from channels.email import EmailChannel
from gateway.app import Gateway
from gateway.config import load_config
from tests.channels.e2e import valkey, worker
from tests.channels.harness_email import BOT, append, imap_client, receiving
from tests.channels.kit import eventually
from tests.channels.tcp_relay import TcpRelay
from tests.fakes import dovecot
from tests.fakes.smtp_server import AUTHSERV_ID, SmtpServer
from tests.media.files import exe, pdf, png
from tests.media.stack import FILE_CAP, answered, config, saw_files

pytestmark = pytest.mark.skipif(dovecot.should_skip(), reason=dovecot.SKIP_REASON)

ADA, MALLORY = "ada@example.org", "mallory@example.com"  # allowed; never approved


def _mail(sender: str, message_id: str, text: str,
          files: list[tuple[bytes, str, str, str]], dmarc: str = "pass") -> bytes:
    """A mail whose sender's domain got ``dmarc`` at the receiving server, with ``files``
    (data, maintype, subtype, file name) attached."""
    msg = EmailMessage()
    domain = sender.rpartition("@")[2]
    msg["Authentication-Results"] = f"{AUTHSERV_ID}; dmarc={dmarc} header.from={domain}"
    msg["From"], msg["To"] = sender, f"Claw <{BOT}>"
    msg["Subject"], msg["Message-ID"] = "files", f"<{message_id}>"
    msg.set_content(text)
    for data, maintype, subtype, name in files:
        msg.add_attachment(data, maintype, subtype, filename=name)
    return msg.as_bytes()


def _parts_asked(relay: TcpRelay, uid: int) -> set[str]:
    """The MIME sections of mail ``uid`` the bot asked dovecot for (what
    ``fetch_attachment`` sends; receiving reads the whole mail, ``BODY.PEEK[]``)."""
    asked = re.compile(rb"UID FETCH %d \(UID BODY\.PEEK\[([\d.]+(?:\.MIME)?)\]" % uid,
                       re.IGNORECASE)
    return {m.decode() for sent in relay.upstream for m in asked.findall(bytes(sent))}


async def test_email_files_refusals_and_a_stranger(tmp_path: Path) -> None:
    image, doc, tool = png(), pdf(), exe()
    big = pdf() + b"%" * (FILE_CAP + 10)
    server = dovecot.shared()
    login, password = server.claim_user()
    smtp = SmtpServer({login: password}).start()
    relay = await TcpRelay(server.imap_port).start()
    admin = await imap_client(server.imap_port, login, password)
    tables = f"""
[channels.email]
address = "{BOT}"
username = "{login}"
display_name = "Claw"
imap_host = "127.0.0.1"
imap_port = {relay.port}
imap_security = "none"
smtp_host = "127.0.0.1"
smtp_port = {smtp.port}
smtp_security = "none"
trusted_authserv_ids = ["{AUTHSERV_ID}"]
idle_timeout = 300
backoff_initial = 0.05
backoff_max = 0.5
"""
    try:
        with valkey(tmp_path) as url:
            path = config(tmp_path / "pynanoclaw.toml", url, tables, allow=f"email:{ADA}")
            with worker(path, url, {"PNC_TEST_REDIS_URL": url}):
                gw = Gateway(load_config(path), url, env={"EMAIL_PASSWORD": password},
                             consumer="em-media")
                await gw.start()
                try:
                    [channel] = gw.channels.values()
                    assert isinstance(channel, EmailChannel)
                    await receiving(channel)
                    kept = await append(admin, _mail(
                        ADA, "files-1@e2e", "What is in this picture? And the report.",
                        [(image, "image", "png", "chart.png"),
                         (doc, "application", "pdf", "report.pdf")]))
                    refused = await append(admin, _mail(
                        ADA, "files-2@e2e", "And these two?",
                        [(big, "application", "pdf", "big.pdf"),
                         (tool, "application", "pdf", "tool.pdf")]))  # named .pdf
                    # a forger writing as Ada (DMARC fails): dropped, no pairing code
                    forged = await append(admin, _mail(ADA, "forged-1@e2e", "hi",
                                                       [(image, "image", "png", "y.png")],
                                                       dmarc="fail"))
                    spy = await append(admin, _mail(MALLORY, "spy-1@e2e", "hi",
                                                    [(image, "image", "png", "x.png")]))
                    await answered(url, "files-1@e2e", "files-2@e2e")

                    prompt = saw_files(url, image, doc)
                    image_sha = hashlib.sha256(image).hexdigest()
                    doc_sha = hashlib.sha256(doc).hexdigest()
                    assert "And these two?" in prompt  # the text is answered all the same
                    stored = sorted(p.name for p in (tmp_path / "data" / "groups" / "email")
                                    .glob("*/attachments/*") if p.name[0] != ".")
                    assert stored == sorted([f"{image_sha}.png", f"{image_sha}.json",
                                             f"{doc_sha}.pdf", f"{doc_sha}.json"])

                    def told() -> list[str]:
                        out = []
                        for m in smtp.messages():
                            body = m.get_body(preferencelist=("plain",))
                            text = "" if body is None else str(body.get_content())
                            if "couldn't take" in text:
                                assert "files-2@e2e" in str(m["In-Reply-To"])
                                out.append(text)
                        return out

                    def to(address: str) -> bool:
                        return any(address in str(m["To"]) for m in smtp.messages())

                    async def done() -> bool:  # the refusal, and the stranger's pairing code
                        return bool(told()) and to(MALLORY)

                    await eventually(done, timeout=30)
                    [reply] = told()
                    assert "big.pdf" in reply and "limit" in reply
                    assert "tool.pdf" in reply and "file type I don't accept" in reply
                    # the files were read part by part (section 1 is the text); the big
                    # one (over the cap by the size its part announced), the forger's
                    # and the stranger's were never asked for
                    assert _parts_asked(relay, kept) == {"2.MIME", "2", "3.MIME", "3"}
                    assert _parts_asked(relay, refused) == {"3.MIME", "3"}
                    assert _parts_asked(relay, spy) == _parts_asked(relay, forged) == set()
                    assert not any("forged-1@e2e" in str(m["In-Reply-To"])
                                   for m in smtp.messages())
                    # it did reach the gateway (before the stranger's, by UID): dropped
                    assert gw.inbox is not None and gw.inbox.counts["drop"] == 1
                finally:
                    await gw.stop()
    finally:
        smtp.stop()
        await relay.stop()
        with contextlib.suppress(Exception):
            await admin.logout()
