"""Contract harness for the email adapter: a REAL dovecot (IMAP, the shared test-run
instance) for receiving, a local aiosmtpd submission server for sending, and a real
``EmailChannel`` (aioimaplib, aiosmtplib) pointed at both.

Recorded mails (``fixtures/email/*.eml``) are injected the way mail arrives: APPENDed
to the bot's INBOX by a second IMAP client, so the adapter sees them through IDLE.
Each harness gets its own dovecot user (a fresh mailbox) and SMTP server. Needs
Debian's dovecot (``.ci/run`` installs it); skipped with a reason where it is absent.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from email.message import EmailMessage

import aioimaplib
import pytest
from pydantic import SecretStr

from channels.base import Chunk
from channels.email import EmailChannel, EmailSettings
from channels.email.normalize import thread_key
from channels.email.parse import parse
from channels.email.receiver import CURSOR_KEY, Cursor
from channels.models import Outbound
from tests.channels.e2e import GatewayStack
from tests.channels.kit import (
    FIXTURES,
    WAIT,
    HarnessSpec,
    MemoryCursorStore,
    RecordingSink,
    Sent,
    SentFile,
    eventually,
    tags_balanced,
)
from tests.fakes import dovecot
from tests.fakes.smtp_server import AUTHSERV_ID, SmtpServer

BOT = "claw@example.net"
TRIGGER_ID = "trigger-1@example.org"
TRIGGER = f"""\
Authentication-Results: {AUTHSERV_ID}; dmarc=pass header.from=example.org
From: Ada Lovelace <ada@example.org>
To: Claw <{BOT}>, Bob <bob@example.com>
Subject: Plans for the week
Date: Tue, 01 Dec 2026 08:00:00 +0000
Message-ID: <{TRIGGER_ID}>
Content-Type: text/plain; charset="utf-8"

Claw, can you write up the plan?
"""
_APPENDUID = re.compile(rb"\[APPENDUID \d+ (\d+)\]")
_VOID_TAGS = re.compile(r"<(?:hr|br|img)\b[^>]*>")
#: what the fake submission server answers for the kit's HTTP-style statuses
SMTP_FAILURES = {
    403: "550 5.7.1 Message rejected: sender not permitted",
    500: "451 4.3.0 Temporary local problem, please try again",
}


def eml(name: str) -> bytes:
    """A recorded mail with CRLF line ends, as it travels."""
    text = (FIXTURES / "email" / f"{name}.eml").read_bytes()
    return text.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


async def imap_client(port: int, login: str, password: str) -> aioimaplib.IMAP4:
    client = aioimaplib.IMAP4(host="127.0.0.1", port=port, timeout=WAIT)
    await client.wait_hello_from_server()
    response = await client.login(login, password)
    assert response.result == "OK", response
    return client


async def append(
    client: aioimaplib.IMAP4, raw: bytes, folder: str = "INBOX", date: datetime | None = None
) -> int:
    """APPEND ``raw`` (with INTERNALDATE ``date``); return its UID (APPENDUID, RFC 4315)."""
    response = await client.append(raw, mailbox=folder, date=date)
    assert response.result == "OK", response
    found = _APPENDUID.search(b" ".join(bytes(line) for line in response.lines))
    assert found, response
    return int(found.group(1))


def settings_for(server: dovecot.Dovecot, login: str, smtp_port: int) -> EmailSettings:
    return EmailSettings(
        address=BOT,
        username=login,
        display_name="Claw",
        imap_host="127.0.0.1",
        imap_port=server.imap_port,
        imap_security="none",
        smtp_host="127.0.0.1",
        smtp_port=smtp_port,
        smtp_security="none",
        trusted_authserv_ids=[AUTHSERV_ID],
        backoff_initial=0.02,
        backoff_max=0.2,
        # long: mail must arrive by the server's IDLE push, not by a re-issued IDLE
        idle_timeout=300,
        timeout=WAIT,
    )


def sent_record(message: EmailMessage) -> Sent:
    """A mail the fake received, in ``Outbound`` terms."""
    mail = parse(bytes(message), "unknown")
    html = message.get_body(preferencelist=("html",))
    body = html if html is not None else message.get_body(preferencelist=("plain",))
    assert isinstance(body, EmailMessage)
    return Sent(
        chat_id=thread_key(mail),
        text=str(body.get_content()).replace("\r\n", "\n"),  # CRLF is the wire form
        thread_id=None,
        reply_to_id=mail.in_reply_to,
        formatted=html is not None,
    )


class EmailHarness:
    """``AdapterHarness`` for email (IDLE receive mode)."""

    marker_fixture = "direct_to_bot"
    quotes_replies = True

    def __init__(
        self, channel: EmailChannel, smtp: SmtpServer, admin: aioimaplib.IMAP4, password: str
    ) -> None:
        self.channel = channel
        self.smtp = smtp
        self.admin = admin
        self.sink = RecordingSink()
        self.cursors = MemoryCursorStore()
        self.secrets = [password]
        self.uids: dict[str, int] = {}
        self.trigger_chat = thread_key(parse(TRIGGER.encode(), "trigger"))

    async def inject(self, fixture: str) -> None:
        self.uids[fixture] = await append(self.admin, eml(fixture))

    async def redeliver_pending(self) -> None:
        """IMAP is pulled: an unconsumed mail stays above the cursor."""

    async def acked(self, fixture: str) -> bool | None:
        stored = await self.cursors.get(CURSOR_KEY)
        cursor = Cursor.decode(stored) if stored else None
        return cursor is not None and cursor.uid >= self.uids[fixture]

    def sent(self) -> list[Sent]:
        return [sent_record(m) for m in self.smtp.messages()]

    def sent_files(self) -> list[SentFile]:
        """Each attachment of each mail submitted, the plain text as its caption."""
        out = []
        for message in self.smtp.messages():
            chat = sent_record(message).chat_id
            body = message.get_body(preferencelist=("plain",))
            caption = str(body.get_content()).replace("\r\n", "\n").rstrip("\n") \
                if isinstance(body, EmailMessage) else ""
            for part in message.iter_attachments():
                assert isinstance(part, EmailMessage)
                out.append(SentFile(chat, part.get_filename() or "", part.get_content(),
                                    caption, mime=part.get_content_type()))
        return out

    def fail_next_send(self, status: int, retry_after: float | None = None) -> None:
        if status == 429:
            self.smtp.fail_next(
                f"421 4.7.0 Too many messages, try again in {retry_after or 60:g} seconds"
            )
        else:
            self.smtp.fail_next(SMTP_FAILURES[status])

    def outbound(self, text: str) -> Outbound:
        return Outbound(
            channel="email",
            chat_id=self.trigger_chat,
            reply_to_id=TRIGGER_ID,
            text=text,
            reply_id="turn-1",
        )

    def chunk_well_formed(self, chunk: Chunk) -> bool:
        return tags_balanced(_VOID_TAGS.sub("", chunk.text))


async def receiving(channel: EmailChannel) -> None:
    """Wait until the receive loop idles: its first connect starts at UIDNEXT, so mail
    sent before then is old mail and never delivered."""

    async def idling() -> bool:
        return channel.receiver is not None and channel.receiver.idling.is_set()

    await eventually(idling)


class EmailStack(GatewayStack):
    """A gateway stack with one email channel, started once it receives."""

    async def started(self) -> None:
        assert self.gateway is not None
        [channel] = self.gateway.channels.values()
        assert isinstance(channel, EmailChannel)
        await receiving(channel)


@asynccontextmanager
async def started_channel(
    settings_overrides: dict[str, object] | None = None,
    *,
    account: tuple[str, str] | None = None,
    cursors: MemoryCursorStore | None = None,
    relay: bool = False,
) -> AsyncIterator[EmailHarness]:
    """A fresh dovecot user (or ``account``) with the trigger mail, an SMTP fake, the
    channel started (bound to ``cursors`` if given) and its receive loop idling, so
    injected mail is new mail. ``relay``: the SMTP server delivers to dovecot (LMTP)
    and the bot's address is its login (``BOT`` an alias), so the copy of each reply the
    bot sends itself arrives in its mailbox."""
    if dovecot.should_skip():
        pytest.skip(dovecot.SKIP_REASON)
    server = dovecot.shared()
    login, password = account or server.claim_user()
    smtp = SmtpServer({login: password},
                      lmtp_port=server.lmtp_port if relay else None).start()
    admin = await imap_client(server.imap_port, login, password)
    try:
        await append(admin, TRIGGER.replace("\n", "\r\n").encode())
        settings = settings_for(server, login, smtp.port)
        if relay:
            settings = settings.model_copy(update={"address": login, "aliases": [BOT]})
        if settings_overrides:
            settings = settings.model_copy(update=settings_overrides)
        channel = EmailChannel(settings, password=SecretStr(password))
        harness = EmailHarness(channel, smtp, admin, password)
        if cursors is not None:
            harness.cursors = cursors
        channel.bind(harness.cursors)
        await channel.start(harness.sink)
        try:
            await receiving(channel)
            yield harness
        finally:
            await channel.stop()
    finally:
        smtp.stop()
        with contextlib.suppress(Exception):  # a test may have had the session kicked
            await asyncio.wait_for(admin.logout(), 2)


HARNESSES = [HarnessSpec(id="email-imap-idle", platform="email", factory=started_channel)]
