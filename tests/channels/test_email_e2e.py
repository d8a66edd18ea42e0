"""End to end against real mail servers: a human's mail, sent with aiosmtplib through
an aiosmtpd relay that delivers to a real dovecot over LMTP, reaches the bot through
IMAP IDLE -> gateway inbox (real Valkey) -> a real worker process (scripted model) ->
outbox -> EmailChannel (aiosmtplib through the relay) -> the human's mailbox, with the
right thread headers; the bot's copy lands in its Sent folder (the copy it sent
itself, moved there from its INBOX).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import default as default_policy
from pathlib import Path

import aiosmtplib
import pytest

from tests.channels.e2e import running
from tests.channels.harness_email import EmailStack, imap_client
from tests.channels.kit import eventually
from tests.fakes import dovecot
from tests.fakes.smtp_server import SmtpServer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(dovecot.should_skip(), reason=dovecot.SKIP_REASON),
]


class Mail:
    """The servers and accounts of one test: the bot, a human, the relay."""

    def __init__(self) -> None:
        self.dovecot = dovecot.shared()
        self.bot, self.bot_password = self.dovecot.claim_user()
        self.human, self.human_password = self.dovecot.claim_user()
        self.relay = SmtpServer(
            {self.bot: self.bot_password, self.human: self.human_password},
            lmtp_port=self.dovecot.lmtp_port,
        ).start()

    async def send_as_human(self, subject: str, body: str, message_id: str,
                            answering: EmailMessage | None = None) -> None:
        msg = EmailMessage()
        msg["From"] = f"Ada <{self.human}>"
        msg["To"] = f"Claw <{self.bot}>"
        msg["Subject"] = subject
        msg["Message-ID"] = f"<{message_id}>"
        if answering is not None:  # what a mail client writes when answering
            msg["In-Reply-To"] = str(answering["Message-ID"])
            msg["References"] = f'{answering["References"]} {answering["Message-ID"]}'.strip()
        msg.set_content(body)
        await aiosmtplib.send(msg, hostname="127.0.0.1", port=self.relay.port,
                              username=self.human, password=self.human_password)

    async def mailbox(self, login: str, password: str, folder: str) -> list[EmailMessage]:
        """Every message in ``folder`` of ``login`` (read with a separate IMAP client)."""
        client = await imap_client(self.dovecot.imap_port, login, password)
        try:
            response = await client.select(folder)
            assert response.result == "OK", response
            fetched = await client.fetch("1:*", "(BODY.PEEK[])")
            raws = [bytes(line) for line in fetched.lines if isinstance(line, bytearray)]
        finally:
            await client.logout()
        parser = BytesParser(policy=default_policy)
        return [m for m in (parser.parsebytes(r) for r in raws) if isinstance(m, EmailMessage)]

    async def human_inbox(self) -> list[EmailMessage]:
        return await self.mailbox(self.human, self.human_password, "INBOX")

    async def wait_replies(self, count: int) -> list[EmailMessage]:
        found: list[EmailMessage] = []

        async def enough() -> bool:
            nonlocal found
            found = await self.human_inbox()
            return len(found) >= count

        await eventually(enough, timeout=90)
        return found


class Stack(EmailStack):
    def __init__(self, mail: Mail) -> None:
        super().__init__({"EMAIL_PASSWORD": mail.bot_password}, "email-e2e")
        self.mail = mail


@pytest.fixture
async def stack(tmp_path: Path) -> AsyncIterator[Stack]:
    mail = Mail()
    tables = f"""
[channels.email]
address = "{mail.bot}"
display_name = "Claw"
imap_host = "127.0.0.1"
imap_port = {mail.dovecot.imap_port}
imap_security = "none"
smtp_host = "127.0.0.1"
smtp_port = {mail.relay.port}
smtp_security = "none"
trusted_authserv_ids = ["mx.pnc.test"]
backoff_initial = 0.05
backoff_max = 0.5
"""
    try:
        async with running(Stack(mail), tmp_path, tables) as s:
            yield s
    finally:
        mail.relay.stop()


def _ids(value: object) -> list[str]:
    return str(value or "").replace("<", " ").replace(">", " ").split()


async def test_a_humans_mail_is_answered_in_the_thread(stack: Stack) -> None:
    mail = stack.mail
    await mail.send_as_human("Dinner plans", "Claw, what did we pick for Friday?", "ada-1@e2e")
    [reply] = await mail.wait_replies(1)
    assert _ids(reply["In-Reply-To"]) == ["ada-1@e2e"]
    assert _ids(reply["References"]) == ["ada-1@e2e"]
    assert str(reply["Subject"]) == "Re: Dinner plans"
    assert mail.bot in str(reply["From"])
    assert mail.human in str(reply["To"])
    assert str(reply["Auto-Submitted"]) == "auto-replied"
    # the relay judged the bot's own submission: its domain passed DMARC
    assert "dmarc=pass" in str(reply["Authentication-Results"])
    # the scripted model acks the message ids it saw: the human's Message-ID
    plain = reply.get_body(preferencelist=("plain",))
    html = reply.get_body(preferencelist=("html",))
    assert plain is not None and html is not None  # multipart/alternative
    assert "ada-1@e2e" in plain.get_content()
    # the copy the bot sent itself is moved to Sent, under the same Message-ID: one
    # copy there, none left in its INBOX beside the human's mail
    async def filed() -> bool:
        sent = await mail.mailbox(mail.bot, mail.bot_password, "Sent")
        inbox = await mail.mailbox(mail.bot, mail.bot_password, "INBOX")
        return ([str(m["Message-ID"]) for m in sent] == [str(reply["Message-ID"])]
                and [str(m["Message-ID"]) for m in inbox] == ["<ada-1@e2e>"])

    await eventually(filed)


async def test_mail_that_arrives_while_the_gateway_is_down_is_answered_once(
    stack: Stack,
) -> None:
    mail = stack.mail
    await mail.send_as_human("Question", "First question", "ada-2@e2e")
    [first] = await mail.wait_replies(1)
    await stack.stop_gateway()
    # IDLE is gone; the mail waits above the persisted (UIDVALIDITY, UID) cursor
    await mail.send_as_human("Re: Question", "Second question", "ada-3@e2e", answering=first)
    await stack.start_gateway()
    replies = await mail.wait_replies(2)
    await stack.stop_gateway()  # nothing more can come once the gateway is stopped
    replies = await mail.human_inbox()
    answered = [_ids(r["In-Reply-To"]) for r in replies]
    assert answered == [["ada-2@e2e"], ["ada-3@e2e"]]
    # the second reply continues the thread: root first, then the human's mail
    assert _ids(replies[1]["References"])[0] == "ada-2@e2e"
    assert _ids(replies[1]["References"])[-1] == "ada-3@e2e"
