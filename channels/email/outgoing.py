"""Replies out: find the mail being answered, send once, and prove it went out.

Idempotency per reply id: the reply's Message-ID is derived from the reply id and
chunk index (``compose.reply_message_id``). Where the bot files its replies itself
(``EmailSettings.files_sent``: not on Gmail), each mail also goes to the bot's own
address, an envelope-only recipient (``compose.envelope``): the server accepts the
message for all of a transaction's recipients with one answer, so that copy arriving in
the watched folder proves the mail went out, and the receiver then moves it to Sent,
where it is the Sent copy (``Receiver``; no APPEND, so no second copy). Gmail files
each SMTP submission in Sent itself, so there the Sent folder is the proof.

Before each send, and after an ambiguous failure (the connection dropped, or no answer,
after the DATA: ``MaybeSent``), the watched folder and Sent are searched for the
Message-ID. ``find_sent`` polls for up to ``sent_wait`` seconds, as delivery to the own
mailbox is asynchronous; found, the mail is not sent again; not found in time, the
outbox sends it again (counted as ambiguous), with the same Message-ID.

The mail being answered is found by its Message-ID (``Outbound.reply_to_id``) in the
watched folder, so recipients, subject and References come from the server, not from
state kept in the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from email.message import EmailMessage, Message
from email.parser import BytesHeaderParser, BytesParser
from email.policy import default as default_policy

from pydantic import SecretStr

from channels.base import Chunk
from channels.email.authresults import verdict
from channels.email.compose import compose, envelope, reply_message_id
from channels.email.imap import ImapSession, TokenSource
from channels.email.normalize import unverified_thread
from channels.email.parse import addresses, stand_in_uid
from channels.email.settings import EmailSettings
from channels.email.smtp import send_mail
from channels.errors import NetworkError, PermanentError
from channels.models import Outbound
from channels.outfiles import MB, check_size
from channels.recent import Recent

log = logging.getLogger(__name__)

#: originals kept in memory (headers only) for multi-chunk replies
_CACHE_SIZE = 256
#: how often ``find_sent`` searches again while it waits, seconds
_POLL = 0.5
#: a reply mail is one chunk of at most 10,000 characters, as text and HTML: a mail
#: far bigger with its Message-ID is not the bot's copy and is not downloaded
_COPY_MAX = 1_000_000
#: the largest mail sent with a file, its encoding included (Gmail's sending limit:
#: support.google.com/mail/answer/6584): a bigger one gets the outbox's note instead
MAIL_MAX = 25 * MB


def _same_text(raw: bytes, chunk: Chunk) -> bool:
    """Whether the mail ``raw`` carries ``chunk``'s text as its plain part (what
    ``compose`` wrote; line ends and the final newline as the wire left them)."""
    mail = BytesParser(policy=default_policy).parsebytes(raw)
    body = mail.get_body(preferencelist=("plain",)) if isinstance(mail, EmailMessage) else None
    if not isinstance(body, EmailMessage):
        return False
    text = str(body.get_content()).replace("\r\n", "\n").rstrip("\n")
    return text == chunk.plain.replace("\r\n", "\n").rstrip("\n")


class Outgoing:
    """Sends replies; owns one IMAP connection for lookups and Sent, opened lazily."""

    def __init__(
        self,
        settings: EmailSettings,
        imap: Callable[[], ImapSession],
        *,
        password: SecretStr | None = None,
        token: TokenSource | None = None,
    ) -> None:
        self._settings = settings
        self._new_imap = imap
        self._password = password
        self._token = token
        self._imap: ImapSession | None = None
        self._lock = asyncio.Lock()
        #: (Message-ID, verified) -> header of the mail answered
        self._originals: Recent[tuple[str, bool], Message] = Recent(_CACHE_SIZE)

    def __repr__(self) -> str:
        return f"Outgoing({self._settings.address!r})"

    async def close(self) -> None:
        async with self._lock:
            if self._imap is not None:
                await self._imap.close()
                self._imap = None

    @contextlib.asynccontextmanager
    async def _connected(self) -> AsyncIterator[ImapSession]:
        """The session, under the lock; dropped on network trouble (the next call
        reconnects)."""
        async with self._lock:
            try:
                if self._imap is None:
                    session = self._new_imap()
                    await session.connect()
                    self._imap = session
                yield self._imap
            except NetworkError:
                with contextlib.suppress(Exception):
                    if self._imap is not None:
                        await self._imap.close()
                self._imap = None
                raise

    async def _find(self, session: ImapSession, folder: str, message_id: str) -> list[int]:
        await session.select(folder)
        return await session.search("HEADER", "Message-ID", f'"<{message_id}>"')

    async def _filed(self, session: ImapSession, message_id: str, chunk: Chunk,
                     size: int = _COPY_MAX) -> str | None:
        """The folder holding the copy of chunk ``chunk`` sent as ``message_id``: the
        watched folder (the own copy before the receiver moved it) or Sent, else None.
        In that order: a MOVE is atomic, so a copy moved between the two searches is
        still seen in Sent. Reply Message-IDs are predictable and anyone can mail the
        bot one, so a mail counts only when its text is the chunk's: a forger who sent
        one first does not silence the reply. A copy over ``size`` bytes is not
        downloaded."""
        for folder in (self._settings.folder, self._settings.sent_folder):
            for uid in await self._find(session, folder, message_id):
                info = await session.info(uid)
                if info is None or info.size > size:
                    continue
                raw = await session.body(uid)
                if raw is not None and _same_text(raw, chunk):
                    return folder
        return None

    async def _candidates(self, session: ImapSession, message_id: str) -> list[int]:
        """UIDs of the mail being answered, newest first: the one its stand-in id names
        when it had no usable Message-ID, else every mail with that Message-ID."""
        folder = self._settings.folder
        where = stand_in_uid(message_id)
        if where is not None:
            selected = await session.select(folder)
            # renumbered folder: the UID names another mail now (or none)
            return [where[1]] if selected.uidvalidity == where[0] else []
        return sorted(await self._find(session, folder, message_id), reverse=True)

    async def _original(self, session: ImapSession, message: Outbound) -> Message:
        """The header of the mail ``message`` answers. A Message-ID is the sender's
        choice, so a forger can reuse one: of the mails carrying it, the one whose
        authentication matches the conversation's (``normalize.unverified_thread``) is
        answered, never a forged one in a verified thread's place, nor the reverse."""
        answered = message.reply_to_id or message.thread_id
        assert answered is not None
        verified = not unverified_thread(message.chat_id)
        key = (answered, verified)
        cached = self._originals.get(key)
        if cached is not None:
            self._originals.move_to_end(key)
            return cached
        for uid in await self._candidates(session, answered):
            header = await session.body(uid, "HEADER")
            if header is None:
                continue
            original = BytesHeaderParser().parsebytes(header)
            if self._verified(original) == verified:
                self._originals[key] = original
                return original
        raise PermanentError(
            "thread_gone", f"the mail being answered is no longer in {self._settings.folder}"
        )

    def _verified(self, original: Message) -> bool:
        """The receiving server's verdict on the original's From, judged again from its
        headers as the receiver judged it (``authresults``): an unverified mail is
        answered to its From alone (``compose.recipients``)."""
        senders = addresses(original, "From")
        if not senders:
            return False
        results = [str(v) for v in original.get_all("Authentication-Results", [])]
        return verdict(results, senders[0], self._settings.trusted_authserv_ids).verified

    async def send(self, message: Outbound, chunk: Chunk, index: int,
                   attachment: tuple[bytes, str] | None = None) -> str:
        """Send chunk ``index`` of ``message`` (with ``attachment``, a file's bytes and
        name, attached); return its Message-ID."""
        if not (message.reply_to_id or message.thread_id):
            raise PermanentError(
                "no_thread", "an email reply needs reply_to_id or thread_id (the mail it "
                "answers)"
            )
        message_id = reply_message_id(message.reply_id, index, self._settings.address)
        async with self._connected() as session:
            original = await self._original(session, message)
            # a copy with a file is as big as the file (base64: 4/3) and its headers
            limit = _COPY_MAX + (len(attachment[0]) * 2 if attachment else 0)
            folder = await self._filed(session, message_id, chunk, limit)
            if folder is not None:
                log.info("email: reply %s chunk %d is already in %s; not sent again",
                         message.reply_id, index, folder)
                return message_id
            mail = compose(original, self._settings, chunk, message_id,
                           verified=self._verified(original), attachment=attachment)
            if attachment is not None:
                check_size(len(mail.as_bytes()), MAIL_MAX, "mails with their attachments")
            self_copy = self._settings.files_sent(session.gmail)
            recipients = envelope(mail, self._settings, self_copy=self_copy)
            if not recipients:
                raise PermanentError("no_recipients", "the mail being answered names no "
                                     "one but the bot")
            password = self._password.get_secret_value() if self._password else None
            refused = await send_mail(mail, self._settings, recipients, password=password,
                                      token=self._token)
            if self_copy and self._settings.address in refused:
                log.warning("email: the server refused the bot's own copy of %s: no Sent "
                            "copy, and an ambiguous send of it could not be checked",
                            message_id)
            return message_id

    async def find_sent(self, message: Outbound, chunk: Chunk, index: int) -> str | None:
        """After an ambiguous send of ``chunk`` (number ``index``): its Message-ID once
        the own copy (or, on Gmail, the Sent copy) is found, polling up to ``sent_wait``
        seconds; None when it did not come in time (the outbox sends it again)."""
        message_id = reply_message_id(message.reply_id, index, self._settings.address)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._settings.sent_wait
        while True:
            async with self._connected() as session:
                # a copy as big as a mail with a file may be: the chunk may be a file's
                # caption (``EmailChannel.send_file``)
                folder = await self._filed(session, message_id, chunk, MAIL_MAX)
            if folder is not None:
                log.info("email: reply %s chunk %d arrived (found in %s)",
                         message.reply_id, index, folder)
                return message_id
            left = deadline - loop.time()
            if left <= 0:
                log.warning("email: reply %s chunk %d not found in %s or %s after %.0fs",
                            message.reply_id, index, self._settings.folder,
                            self._settings.sent_folder, self._settings.sent_wait)
                return None
            await asyncio.sleep(min(_POLL, left))
