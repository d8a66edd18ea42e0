"""The receive loop: IMAP IDLE (or polling), each new mail to the sink, then the cursor.

State machine of one mailbox::

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

from channels.base import SKIPPED_KEY, CursorStore, InboundSink
from channels.email.attachments import part_prefix
from channels.email.authresults import verdict
from channels.email.compose import is_reply_message_id
from channels.email.imap import ImapSession
from channels.email.normalize import Dropped, normalize
from channels.email.parse import BadMail, ParsedMail, parse, stand_in_id
from channels.email.settings import EmailSettings
from channels.errors import NetworkError, PermanentError
from channels.models import Inbound
from channels.retry import Backoff

log = logging.getLogger(__name__)

CURSOR_KEY = "imap"
DEAD_LETTER_KEY = SKIPPED_KEY
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


class _SinkFailed(Exception):
    """The sink could not make a message durable; retry it later."""


class Receiver:
    """Runs until cancelled; ``PermanentError`` (refused login) ends it."""

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
        self._cursors = cursors
        self._account = account
        self._memory: dict[str, str] = {}  # without a store (unit tests): in memory
        self.idling = asyncio.Event()  # set while waiting in IDLE/poll (tests wait on it)
        self._served = False  # this connection got as far as waiting for new mail
        #: the recorded dead letters (read at each connect, kept as they are added)
        self.skipped: list[dict[str, object]] = []

    async def _get(self, key: str) -> str | None:
        if self._cursors is None:
            return self._memory.get(key)
        return await self._cursors.get(key)

    async def _set(self, key: str, value: str) -> None:
        if self._cursors is None:
            self._memory[key] = value
        else:
            await self._cursors.set(key, value)

    async def run(self, first: ImapSession | None = None) -> None:
        backoff = Backoff(self.settings.backoff_initial, self.settings.backoff_max)
        session = first
        while True:
            problem = "connection ended"
            try:
                if session is None:
                    session = self._new_session()
                    await session.connect()
                await self._serve(session)
            except PermanentError:
                raise  # a refused login or revoked token: the operator must act
            except (NetworkError, _SinkFailed) as err:
                problem = str(err)
            except Exception as err:  # e.g. the cursor store (Redis) is unreachable
                problem = f"receive loop error {type(err).__name__}: {err}"
            finally:
                self.idling.clear()
                if session is not None:
                    await session.close()
                    session = None
            if self._served:  # the last connection worked: start the backoff afresh
                backoff.reset()
                self._served = False
            delay = backoff.next_delay()
            log.warning("email[%s]: %s; retrying in %.1fs", self._account, problem, delay)
            await asyncio.sleep(delay)

    async def _start_cursor(self, session: ImapSession) -> tuple[Cursor, list[int]]:
        """The cursor to continue from, and UIDs to re-deliver after a UIDVALIDITY change."""
        selected = await session.select(self.settings.folder)
        stored = await self._get(CURSOR_KEY)
        cursor = Cursor.decode(stored) if stored else None
        if cursor is None:
            cursor = Cursor(selected.uidvalidity, selected.uidnext - 1, _today())
            await self._set(CURSOR_KEY, cursor.encode())
            return cursor, []
        if cursor.uidvalidity == selected.uidvalidity:
            return cursor, []
        log.warning(
            "email[%s]: UIDVALIDITY of %s changed (%d -> %d); re-reading mail since %s",
            self._account, self.settings.folder, cursor.uidvalidity, selected.uidvalidity,
            cursor.day,
        )
        again = sorted(await session.search("SINCE", _imap_date(cursor.day)))
        top = max([selected.uidnext - 1, *again])
        return Cursor(selected.uidvalidity, top, cursor.day), again

    async def _serve(self, session: ImapSession) -> None:
        self.skipped = await self._dead_letters()
        cursor, again = await self._start_cursor(session)
        if again:
            # a re-sync is all or nothing: the new cursor is stored once every re-read
            # mail is queued (a failure midway re-reads them all; the inbox dedupes)
            for uid in again:
                await self._deliver(session, cursor, uid, persist=False)
            cursor = Cursor(cursor.uidvalidity, cursor.uid, _today())
            await self._set(CURSOR_KEY, cursor.encode())
        backoff = Backoff(self.settings.backoff_initial, self.settings.backoff_max)
        idle = self.settings.idle and session.client.has_capability("IDLE")
        while True:
            try:
                for uid in await session.uids_after(cursor.uid):
                    cursor = await self._deliver(session, cursor, uid)
            except _SinkFailed as err:
                delay = backoff.next_delay()
                log.warning("email[%s]: %s; retrying in %.2fs", self._account, err, delay)
                await asyncio.sleep(delay)
                continue
            backoff.reset()
            self._served = True
            self.idling.set()
            if idle:
                await session.wait_for_news(self.settings.idle_timeout)
            else:
                await asyncio.sleep(self.settings.poll_interval)
                await session.noop()
            self.idling.clear()

    async def _deliver(
        self, session: ImapSession, cursor: Cursor, uid: int, *, persist: bool = True
    ) -> Cursor:
        inbound = await self._read(session, cursor.uidvalidity, uid)
        if inbound is not None:
            try:
                await self._sink(inbound)
            except asyncio.CancelledError:
                raise
            except Exception as err:  # not durable: keep the cursor, retry this UID
                raise _SinkFailed(f"uid {uid} not queued ({type(err).__name__})") from err
        moved = Cursor(cursor.uidvalidity, max(cursor.uid, uid), _today())
        if persist:
            await self._set(CURSOR_KEY, moved.encode())
        return moved

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
        await self._set(DEAD_LETTER_KEY, json.dumps(records[-DEAD_LETTER_KEEP:]))
        self.skipped = records[-DEAD_LETTER_KEEP:]

    async def _dead_letters(self) -> list[dict[str, object]]:
        stored = await self._get(DEAD_LETTER_KEY)
        try:
            records = json.loads(stored) if stored else []
        except ValueError:
            return []
        return [r for r in records if isinstance(r, dict)] if isinstance(records, list) else []
