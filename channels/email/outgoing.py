"""Replies out: find the mail being answered, send once, file a copy in Sent.

Idempotency per reply id: the reply's Message-ID is derived from the reply id and
chunk index (``compose.reply_message_id``). Before sending, the Sent folder is searched
for it; if it is there, the mail already went out (a crash came between the SMTP
answer and the outbox's record) and is not sent again. After sending, the bot APPENDs
its own copy to Sent (dovecot and most servers do not file submitted mail; Gmail does
it itself, so ``append_sent = "auto"`` skips it there).

The mail being answered is found by its Message-ID (``Outbound.reply_to_id``) in the
watched folder, so recipients, subject and References come from the server, not from
state kept in the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable
from email.message import Message
from email.parser import BytesHeaderParser
from email.policy import SMTP  # CRLF line ends, as IMAP APPEND expects
from email.utils import getaddresses

from pydantic import SecretStr

from channels.base import Chunk
from channels.email.authresults import verdict
from channels.email.compose import compose, reply_message_id
from channels.email.imap import ImapSession, TokenSource
from channels.email.normalize import unverified_thread
from channels.email.parse import stand_in_uid
from channels.email.settings import EmailSettings
from channels.email.smtp import send_mail
from channels.errors import NetworkError, PermanentError
from channels.models import Outbound

log = logging.getLogger(__name__)

#: originals kept in memory (headers only) for multi-chunk replies
_CACHE_SIZE = 256


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
        self._originals: OrderedDict[tuple[str, bool], Message] = OrderedDict()

    def __repr__(self) -> str:
        return f"Outgoing({self._settings.address!r})"

    async def close(self) -> None:
        async with self._lock:
            if self._imap is not None:
                await self._imap.close()
                self._imap = None

    async def _session(self) -> ImapSession:
        if self._imap is None:
            session = self._new_imap()
            await session.connect()
            self._imap = session
        return self._imap

    async def _find(self, session: ImapSession, folder: str, message_id: str) -> list[int]:
        await session.select(folder)
        return await session.search("HEADER", "Message-ID", f'"<{message_id}>"')

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
                if len(self._originals) > _CACHE_SIZE:
                    self._originals.popitem(last=False)
                return original
        raise PermanentError(
            "thread_gone", f"the mail being answered is no longer in {self._settings.folder}"
        )

    def _verified(self, original: Message) -> bool:
        """The receiving server's verdict on the original's From, judged again from its
        headers as the receiver judged it (``authresults``): an unverified mail is
        answered to its From alone (``compose.recipients``)."""
        senders = [a for _, a in getaddresses([str(v) for v in original.get_all("From", [])])]
        if not senders:
            return False
        results = [str(v) for v in original.get_all("Authentication-Results", [])]
        return verdict(results, senders[0].lower(),
                       self._settings.trusted_authserv_ids).verified

    def _append_sent(self, session: ImapSession) -> bool:
        mode = self._settings.append_sent
        return mode == "always" or (mode == "auto" and not session.gmail)

    async def send(self, message: Outbound, chunk: Chunk, index: int) -> str:
        """Send chunk ``index`` of ``message``; return its Message-ID."""
        if not (message.reply_to_id or message.thread_id):
            raise PermanentError(
                "no_thread", "an email reply needs reply_to_id or thread_id (the mail it "
                "answers)"
            )
        message_id = reply_message_id(message.reply_id, index, self._settings.address)
        async with self._lock:
            try:
                session = await self._session()
                original = await self._original(session, message)
                if await self._find(session, self._settings.sent_folder, message_id):
                    log.info("email: reply %s chunk %d is already in %s; not sent again",
                             message.reply_id, index, self._settings.sent_folder)
                    return message_id
                mail = compose(original, self._settings, chunk, message_id,
                               verified=self._verified(original))
                password = self._password.get_secret_value() if self._password else None
                await send_mail(mail, self._settings, password=password, token=self._token)
                if self._append_sent(session):
                    try:
                        await session.append(mail.as_bytes(policy=SMTP), self._settings.sent_folder)
                    except NetworkError as err:
                        # sent already: a retry would send it twice; only the copy is missing
                        log.warning("email: sent %s but could not file it in %s: %s",
                                    message_id, self._settings.sent_folder, err)
                return message_id
            except NetworkError:
                with contextlib.suppress(Exception):
                    if self._imap is not None:
                        await self._imap.close()
                self._imap = None
                raise
