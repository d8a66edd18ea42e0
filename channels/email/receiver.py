"""Email's side of the shared receive loop (``channels.pull``): IMAP IDLE (or polling),
each new mail to the sink, then the cursor.

State machine of one mailbox (the loop owns the sink, the cursor writes and the backoff)::

    connect+login -> SELECT folder -> (cursor absent: start at UIDNEXT, no backfill)
      -> deliver every UID above the cursor, in order:
           fetch size -> too big? dead-letter
           fetch body -> parse -> BadMail? dead-letter
           normalize -> dropped? log (the copy of a reply the bot sent itself, see
                        ``outgoing``: moved to Sent, where it is the Sent copy)
           sink(inbound)  (raises: back off, retry the same UID; cursor unchanged)
           cursor := (UIDVALIDITY, UID)      <- only now
      -> IDLE until the server announces mail (or poll_interval without IDLE) -> repeat
    network trouble anywhere: reconnect with jittered exponential backoff (channels.retry)

The cursor is ``"<UIDVALIDITY>:<UID>:<YYYY-MM-DD>"``. When the server's UIDVALIDITY no
longer matches (the folder was recreated or renumbered), the stored UIDs mean nothing:
the mail since the day of the last cursor write is delivered again, and the new
cursor is stored only once all of it is queued (older mail stays unread). Every message keeps
its Message-ID, hence its ``dedupe_id``, so the inbox drops the ones already queued and
nothing is doubled or lost. Dead letters are logged and recorded (newest
``DEAD_LETTER_KEEP``) under the cursor store key ``SKIPPED_KEY``, where ``pynanoclaw
status`` and ``dead list`` read them; ``skipped`` holds them for ``/healthz``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from channels.base import SKIPPED_KEY, CursorStore, InboundSink, MemoryCursors
from channels.email.attachments import part_prefix
from channels.email.authresults import verdict
from channels.email.compose import is_reply_message_id
from channels.email.imap import ImapSession
from channels.email.normalize import Dropped, normalize
from channels.email.parse import BadMail, ParsedMail, parse, stand_in_id
from channels.email.settings import EmailSettings
from channels.errors import NetworkError, PermanentError
from channels.models import Inbound
from channels.pull import Batch, Item, PullLoop, raise_if_cancelling

log = logging.getLogger(__name__)

CURSOR_KEY = "imap"
DEAD_LETTER_KEEP = 100
_IMAP_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]


@dataclass(frozen=True)
class Cursor:
    uidvalidity: int
    uid: int
    day: str  # ISO date of the last write: where a re-sync starts

    def encode(self) -> str:
        return f"{self.uidvalidity}:{self.uid}:{self.day}"

    @classmethod
    def decode(cls, value: str) -> Cursor | None:
        parts = value.split(":")
        if len(parts) != 3 or not (parts[0].isdigit() and parts[1].isdigit()):
            return None
        return cls(int(parts[0]), int(parts[1]), parts[2])


def _today() -> str:
    return datetime.now(UTC).date().isoformat()


def _imap_date(iso_day: str) -> str:
    """``SEARCH SINCE`` wants ``1-Dec-2026``; one day earlier covers time zones."""
    try:
        day = datetime.fromisoformat(iso_day).date() - timedelta(days=1)
    except ValueError:
        day = datetime.now(UTC).date() - timedelta(days=1)
    return f"{day.day}-{_IMAP_MONTHS[day.month - 1]}-{day.year}"


class Receiver:
    """Runs until cancelled; ``PermanentError`` (refused login) ends it.

    The shared pull loop (``channels.pull``) owns the sink, the cursor commits and the
    backoff; ``_fetch`` is this mailbox's side of it. It hands over one mail per fetch
    (a mailbox may hold many big mails; only one body is in memory at a time) with the
    cursor after it, and otherwise waits for news. Any failure closes the connection, so
    the loop's next fetch reconnects from the committed cursor.
    """

    def __init__(
        self,
        settings: EmailSettings,
        new_session: Callable[[], ImapSession],
        sink: InboundSink,
        cursors: CursorStore | None,
        account: str,
    ) -> None:
        self.settings = settings
        self._new_session = new_session
        self._sink = sink
        self._store: CursorStore = cursors if cursors is not None else MemoryCursors()
        self._account = account
        #: set while caught up and waiting for new mail in IDLE/poll (tests wait on it)
        self.idling = asyncio.Event()
        #: the recorded dead letters (read at each connect, kept as they are added)
        self.skipped: list[dict[str, object]] = []
        self._session: ImapSession | None = None
        self._fresh = False  # connected, not yet SELECTed
        self._cursor: Cursor | None = None  # where this connection has read up to
        self._pending: list[int] = []  # UIDs listed and not yet handed over
        self._resync: Cursor | None = None  # stored once the re-read mail is all queued

    async def run(self, first: ImapSession | None = None) -> None:
        self._session, self._fresh = first, first is not None
        loop = PullLoop(self._fetch, self._sink, self._store, CURSOR_KEY,
                        backoff=self.settings.backoff(),
                        stall_after=None, log=log, name=f"email[{self._account}]")
        try:
            await loop.run()
        finally:
            self.idling.clear()
            await self._drop()
        # the loop ends only for a refused login or revoked token: the operator must act
        raise PermanentError(loop.fatal or "receiving stopped")

    async def _drop(self) -> None:
        if self._session is not None:
            await self._session.close()
        self._session, self._fresh, self._pending = None, False, []

    async def _fetch(self, committed: str | None) -> Batch:
        try:
            return await self._next(committed)
        except BaseException:
            self.idling.clear()
            await self._drop()
            raise

    async def _next(self, committed: str | None) -> Batch:
        if self._session is None:
            self._session = self._new_session()
            await self._session.connect()
            self._fresh = True
        session = self._session
        if self._fresh:
            self._fresh = False
            self.skipped = await self._dead_letters()
            self._cursor, self._pending, self._resync = await self._start_cursor(
                session, Cursor.decode(committed) if committed else None)
            if self._cursor.encode() != committed and self._resync is None:
                return Batch(cursor=self._cursor.encode())  # a first start: from now on
        assert self._cursor is not None
        if not self._pending:
            if self._resync is not None:
                # a re-sync is all or nothing: its cursor is stored once every re-read
                # mail is queued (a failure midway re-reads them all; the inbox dedupes)
                self._cursor, self._resync = self._resync, None
                return Batch(cursor=self._cursor.encode())
            self._pending = await session.uids_after(self._cursor.uid)
            if not self._pending:
                await self._wait(session)
                self._pending = await session.uids_after(self._cursor.uid)
        if not self._pending:
            return Batch()
        self.idling.clear()
        uid = self._pending.pop(0)
        inbound = await self._read(session, self._cursor.uidvalidity, uid)
        if self._resync is not None:
            return Batch([Item(inbound)])
        self._cursor = Cursor(self._cursor.uidvalidity, max(self._cursor.uid, uid), _today())
        return Batch([Item(inbound, self._cursor.encode())])

    async def _wait(self, session: ImapSession) -> None:
        """Caught up: wait until the server announces mail (or ``poll_interval``)."""
        raise_if_cancelling()
        self.idling.set()
        if self.settings.idle and session.client.has_capability("IDLE"):
            await session.wait_for_news(self.settings.idle_timeout)
        else:
            await asyncio.sleep(self.settings.poll_interval)
            await session.noop()

    async def _start_cursor(self, session: ImapSession, stored: Cursor | None
                            ) -> tuple[Cursor, list[int], Cursor | None]:
        """The cursor to continue from, the UIDs to read first, and, after a UIDVALIDITY
        change, the cursor to store once those are all queued."""
        selected = await session.select(self.settings.folder)
        if stored is None:
            return Cursor(selected.uidvalidity, selected.uidnext - 1, _today()), [], None
        if stored.uidvalidity == selected.uidvalidity:
            return stored, [], None
        log.warning(
            "email[%s]: UIDVALIDITY of %s changed (%d -> %d); re-reading mail since %s",
            self._account, self.settings.folder, stored.uidvalidity, selected.uidvalidity,
            stored.day,
        )
        again = sorted(await session.search("SINCE", _imap_date(stored.day)))
        top = max([selected.uidnext - 1, *again])
        return (Cursor(selected.uidvalidity, top, stored.day), again,
                Cursor(selected.uidvalidity, top, _today()))

    async def _read(self, session: ImapSession, uidvalidity: int, uid: int) -> Inbound | None:
        """The message as an Inbound, or None (gone, dropped or dead-lettered)."""
        info = await session.info(uid)
        if info is None:
            return None  # expunged meanwhile
        if info.size > self.settings.max_message_bytes:
            await self._dead_letter(uidvalidity, uid, f"too big ({info.size} bytes)")
            return None
        raw = await session.body(uid)
        if raw is None:
            return None
        try:
            mail = parse(raw, fallback_id=stand_in_id(uidvalidity, uid),
                         max_text=self.settings.max_text_chars,
                         part_prefix=part_prefix(uidvalidity, uid))
            judged = verdict(
                mail.auth_results, mail.from_address, self.settings.trusted_authserv_ids
            )
            result = normalize(
                mail, judged, self.settings, account=self._account,
                gm_thread_id=info.gm_thread_id, uid=uid,
            )
        except BadMail as err:
            await self._dead_letter(uidvalidity, uid, str(err))
            return None
        except Exception as err:
            await self._dead_letter(uidvalidity, uid, f"unreadable: {type(err).__name__}: {err}")
            return None
        if isinstance(result, Dropped):
            if self._own_copy(session, mail):
                await self._file_sent(session, uid, mail.message_id)
                return None
            log.info("email[%s]: dropped uid %d (%s): %s", self._account, uid,
                     mail.message_id, result.reason)
            return None
        return result

    def _own_copy(self, session: ImapSession, mail: ParsedMail) -> bool:
        """Whether ``mail`` is the copy of a reply the bot sent to itself (``outgoing``):
        from the bot, with a Message-ID of its replies' form, on a mailbox where the bot
        files Sent copies. Never inbound either way (``normalize`` drops the bot's own
        mail). A forged one is moved too; it proves nothing, as the lookups compare the
        text (``Outgoing._filed``)."""
        return (mail.from_address in self.settings.own_addresses
                and is_reply_message_id(mail.message_id, self.settings.address)
                and self.settings.files_sent(session.gmail))

    async def _file_sent(self, session: ImapSession, uid: int, message_id: str) -> None:
        """Move the own copy to Sent. A server that refuses (a deleted Sent folder)
        leaves it where it is, with a log line: it never holds up the mail after it."""
        try:
            await session.move(uid, self.settings.sent_folder)
        except NetworkError as err:
            log.warning("email[%s]: could not move the bot's copy of %s to %s: %s",
                        self._account, message_id, self.settings.sent_folder, err)
            return
        log.debug("email[%s]: filed the bot's copy of %s in %s", self._account, message_id,
                  self.settings.sent_folder)

    async def _dead_letter(self, uidvalidity: int, uid: int, reason: str) -> None:
        log.warning("email[%s]: skipped bad mail uid %d in %s: %s", self._account, uid,
                    self.settings.folder, reason)
        records = await self._dead_letters()
        records.append({"uidvalidity": uidvalidity, "uid": uid, "folder": self.settings.folder,
                        "reason": reason, "at": datetime.now(UTC).isoformat(timespec="seconds")})
        await self._store.set(SKIPPED_KEY, json.dumps(records[-DEAD_LETTER_KEEP:]))
        self.skipped = records[-DEAD_LETTER_KEEP:]

    async def _dead_letters(self) -> list[dict[str, object]]:
        stored = await self._store.get(SKIPPED_KEY)
        try:
            records = json.loads(stored) if stored else []
        except ValueError:
            return []
        return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []
