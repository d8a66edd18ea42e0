"""The /sync loop: sync, handle invites and kicks, normalize, sink, then move the token.

Promises:

* ``next_batch`` is persisted through the cursor store only after every message of that
  sync went through the sink, so a restart resumes exactly there: nothing lost, nothing
  replayed (at most one sync whose token write was lost, which the inbox dedupes).
  When the sink raises, the loop backs off and syncs again from the same token: the
  homeserver sends the same events again.
* First start (no stored token): one initial sync whose timeline is ignored, so the
  room history is not replayed as new messages. A room the bot just joined starts after
  the bot's own join event, for the same reason.
* A restart syncs with the stored token and ``full_state`` (room members and names are
  not kept between runs). A room with more new events than one sync carries
  (``limited``) is read back with /messages from the timeline's start to the stored
  token, so a long absence loses nothing either.
* Invites are joined by policy (``auto_join``/``invite_allow``) and declined otherwise;
  a kick or ban is logged once and the room forgotten.
* An encrypted message that cannot be decrypted (no E2E support, or no key) is reported
  once per room and skipped: it can never become readable by waiting, so it must not
  hold the token.
* Errors back off with jittered exponential delay (capped); ``M_LIMIT_EXCEEDED`` waits
  what the homeserver asked; a refused token stops the loop with one clear log line.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

from aiohttp import ClientError
from nio import AsyncClient, MegolmEvent, RoomMessagesResponse, SyncError, SyncResponse

from channels.base import CursorStore, InboundSink
from channels.errors import PermanentError, RateLimited
from channels.matrix.errors import map_error
from channels.matrix.normalize import ADMIN_POWER, BotIdentity, RoomView, normalize_event
from channels.matrix.settings import MatrixSettings

log = logging.getLogger(__name__)

TOKEN_KEY = "next_batch"  # noqa: S105 (a cursor name)
#: read-back bound after a long absence: pages of ``timeline_limit`` events per room
MAX_BACKFILL_PAGES = 50


class BackfillFailed(Exception):
    """/messages refused while reading back a room's missed events."""


def room_view(client: AsyncClient, room_id: str) -> RoomView:
    """The normalization view of a room nio tracks (members from state, not names)."""
    room = client.rooms.get(room_id)
    if room is None:
        return RoomView(room_id, None, 0)
    names = {uid: user.display_name or uid for uid, user in room.users.items()}
    power = {
        uid: room.power_levels.get_user_level(uid)
        for uid in room.users
        if room.power_levels.get_user_level(uid) >= ADMIN_POWER
    }
    return RoomView(room_id, room.display_name, room.member_count, names, power)


def _joined_at(events: list[Any], user_id: str) -> int:
    """Index after the bot's own (latest) join in a timeline; 0 if it has none."""
    start = 0
    for i, event in enumerate(events):
        source = getattr(event, "source", {})
        content = source.get("content") if isinstance(source, dict) else None
        if (
            source.get("type") == "m.room.member"
            and source.get("state_key") == user_id
            and isinstance(content, dict)
            and content.get("membership") == "join"
            and (source.get("unsigned", {}).get("prev_content") or {}).get("membership")
            != "join"
        ):
            start = i + 1
    return start


class Syncer:
    """Runs the /sync loop for one bot account until cancelled."""

    def __init__(
        self,
        client: AsyncClient,
        settings: MatrixSettings,
        identity: BotIdentity,
        sink: InboundSink,
        cursors: CursorStore | None,
        account: str = "default",
    ) -> None:
        self._client = client
        self._settings = settings
        self._identity = identity
        self._sink = sink
        self._cursors = cursors
        self._account = account
        self.token: str | None = None
        self.failures = 0
        #: set when the homeserver refused the bot for good; the loop has stopped
        self.fatal: str | None = None
        #: rooms already reported as unreadable (encrypted without keys or support)
        self.reported: set[str] = set()
        #: set once the first sync (initial or resumed) went through
        self.ready = asyncio.Event()

    def __repr__(self) -> str:
        return f"Syncer(account={self._account!r}, failures={self.failures})"

    def sync_filter(self) -> dict[str, Any]:
        return {"room": {"timeline": {"limit": self._settings.timeline_limit}}}

    async def run(self) -> None:
        self.token = await self._load_token()
        full_state = True
        while self.fatal is None:
            first = not self.ready.is_set()
            response = await self._sync(0 if first else self._settings.sync_timeout * 1000,
                                        full_state)
            if response is None:
                continue
            await self._membership(response)
            history = first and self.token is None  # the initial sync is not news
            if not history and not await self._deliver(response):
                continue
            self.token = response.next_batch
            full_state = False
            await self._save_token(self.token)
            self.ready.set()
            await self._e2e_housekeeping()

    async def _load_token(self) -> str | None:
        if self._cursors is None:
            return None
        while True:  # without the stored token the first sync would skip messages
            try:
                return await self._cursors.get(TOKEN_KEY)
            except Exception as error:
                log.warning("matrix: cursor store unavailable (%s); retrying",
                            type(error).__name__)
                await self._backoff()

    async def _sync(self, timeout_ms: int, full_state: bool) -> SyncResponse | None:
        # nio skips a response whose next_batch it has seen (a redelivery after a sink
        # failure would then not be decrypted): let it see our cursor as its position
        self._client.next_batch = self.token
        try:
            response = await self._client.sync(
                timeout=timeout_ms, since=self.token, full_state=full_state or None,
                sync_filter=self.sync_filter(),
            )
        except (ClientError, TimeoutError, OSError) as error:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                # aiohttp can turn a cancel that races its own timeout into a
                # TimeoutError; swallowing it would keep a stopped loop running
                raise asyncio.CancelledError from None
            log.warning("matrix: sync failed (%s); backing off", type(error).__name__)
            await self._backoff()
            return None
        if isinstance(response, SyncResponse):
            self.failures = 0
            return response
        refused = map_error(response) if isinstance(response, SyncError) else None
        if isinstance(refused, RateLimited):
            log.warning("matrix: sync rate limited; waiting %.1fs as asked", refused.retry_after)
            await asyncio.sleep(refused.retry_after)
        elif isinstance(refused, PermanentError) and refused.reason == "unauthorized":
            self.fatal = refused.reason
            log.error("matrix: the homeserver refused the access token; sync stopped. "
                      "Log in again (delete the session file) or set a new token.")
        else:
            log.warning("matrix: sync failed (%s); backing off",
                        refused or type(response).__name__)
            await self._backoff()
        return None

    async def _deliver(self, response: SyncResponse) -> bool:
        """Sink every message of the sync in order; False (after backing off) when the
        sink failed, so the same sync is fetched again."""
        for room_id, info in response.rooms.join.items():
            events = list(info.timeline.events)
            start = _joined_at(events, self._identity.user_id)
            if info.timeline.limited and self.token is not None and start == 0:
                try:
                    events = await self._backfill(room_id, info.timeline.prev_batch) + events
                except (ClientError, TimeoutError, OSError, BackfillFailed) as error:
                    log.warning("matrix: reading back %s failed (%s); the sync will be fetched "
                                "again", room_id, error or type(error).__name__)
                    await self._backoff()
                    return False
            view = room_view(self._client, room_id)
            for event in events[start:]:
                if isinstance(event, MegolmEvent):
                    self._report_undecryptable(room_id, event)
                    continue
                source = getattr(event, "source", None)
                if not isinstance(source, dict):
                    continue
                try:
                    inbound = normalize_event(
                        source, view, self._identity, self._account,
                        display_name_mentions=self._settings.display_name_mentions,
                    )
                except Exception:  # a malformed event must not block the ones behind it
                    log.exception("matrix: event %s in %s could not be normalized; skipped",
                                  source.get("event_id"), room_id)
                    continue
                if inbound is None:
                    continue
                try:
                    await self._sink(inbound)
                except Exception as error:
                    log.warning("matrix: inbox unavailable (%s); the sync will be fetched again",
                                type(error).__name__)
                    await self._backoff()
                    return False
        return True

    async def _backfill(self, room_id: str, prev_batch: str | None) -> list[Any]:
        """The events between the stored token and the start of a ``limited`` timeline
        (more arrived than one sync carries), oldest first, read back with /messages."""
        older: list[Any] = []
        cursor = prev_batch
        for _ in range(MAX_BACKFILL_PAGES):
            if cursor is None:
                break
            page = await self._client.room_messages(
                room_id, start=cursor, end=self.token, limit=self._settings.timeline_limit
            )
            if not isinstance(page, RoomMessagesResponse):
                raise BackfillFailed(str(map_error(page)))
            older.extend(page.chunk)
            if not page.chunk or not page.end or page.end == cursor:
                break
            cursor = page.end
        else:
            log.warning("matrix: room %s had more than %d pages of new events; older ones were "
                        "skipped", room_id, MAX_BACKFILL_PAGES)
        older.reverse()
        return older

    def _report_undecryptable(self, room_id: str, event: MegolmEvent) -> None:
        if room_id in self.reported:
            return
        self.reported.add(room_id)
        if self._client.olm is None:
            log.error(
                "matrix: room %s is end-to-end encrypted and E2E support is %s; its messages "
                "are skipped. Install matrix-nio[e2e] and set encryption = true.",
                room_id, "off" if not self._settings.encryption else "not installed",
            )
        else:
            log.warning(
                "matrix: cannot decrypt messages in %s (no room key for this device yet); "
                "they are skipped and the key is requested", room_id,
            )
            self._request_key(event)

    def _request_key(self, event: MegolmEvent) -> None:
        async def ask() -> None:
            try:
                await self._client.request_room_key(event)
            except Exception as error:
                log.info("matrix: room key request failed (%s)", type(error).__name__)

        asyncio.get_running_loop().create_task(ask())

    async def _membership(self, response: SyncResponse) -> None:
        for room_id, info in response.rooms.invite.items():
            inviter = None
            for event in info.invite_state:
                source = getattr(event, "source", {})
                if source.get("state_key") == self._identity.user_id:
                    inviter = source.get("sender")
            await self._answer_invite(room_id, inviter if isinstance(inviter, str) else None)
        for room_id, left in response.rooms.leave.items():
            for event in left.timeline.events:
                source = getattr(event, "source", {})
                content = source.get("content") or {}
                if (source.get("state_key") == self._identity.user_id
                        and source.get("sender") != self._identity.user_id
                        and content.get("membership") in ("leave", "ban")):
                    what = "banned" if content["membership"] == "ban" else "removed"
                    log.warning("matrix: %s from room %s by %s (%s)", what, room_id,
                                source.get("sender"), content.get("reason") or "no reason")
            try:
                await self._client.room_forget(room_id)
            except Exception as error:
                log.info("matrix: forgetting room %s failed (%s)", room_id, type(error).__name__)

    def invite_allowed(self, room_id: str, inviter: str | None) -> bool:
        mode = self._settings.auto_join
        if mode == "open":
            return True
        if mode == "off" or inviter is None:
            return False
        server = ":" + inviter.split(":", 1)[1] if ":" in inviter else ""
        allow = set(self._settings.invite_allow)
        return inviter in allow or room_id in allow or (bool(server) and server in allow)

    async def _answer_invite(self, room_id: str, inviter: str | None) -> None:
        if self.invite_allowed(room_id, inviter):
            answer: Any = await self._client.join(room_id)
            verb = "joined"
        else:
            answer = await self._client.room_leave(room_id)
            verb = "declined"
        if hasattr(answer, "status_code"):  # an ErrorResponse
            log.warning("matrix: could not answer the invite to %s (%s)", room_id,
                        map_error(answer))
        else:
            log.info("matrix: %s the invite to %s from %s", verb, room_id, inviter)

    async def _e2e_housekeeping(self) -> None:
        """What nio's sync_forever does between syncs: keys up, devices queried, one-time
        keys claimed, to-device messages (room keys) sent."""
        client = self._client
        if client.olm is None:
            return
        try:
            if client.should_upload_keys:
                await client.keys_upload()
            if client.should_query_keys:
                await client.keys_query()
            if client.should_claim_keys:
                await client.keys_claim(client.get_users_for_key_claiming())
            await client.send_to_device_messages()
        except (ClientError, TimeoutError, OSError) as error:
            log.warning("matrix: key exchange failed (%s); retried after the next sync",
                        type(error).__name__)

    async def _save_token(self, token: str) -> None:
        if self._cursors is None:
            return
        try:
            await self._cursors.set(TOKEN_KEY, token)
        except Exception as error:
            # The messages are durable already; if this write is lost a restart syncs
            # from the older token and the inbox dedupes. Not worth stopping for.
            log.warning("matrix: could not persist the sync token (%s)", type(error).__name__)

    async def _backoff(self) -> None:
        self.failures += 1
        ceiling = min(self._settings.backoff_max,
                      self._settings.backoff_initial * 2 ** min(self.failures - 1, 30))
        await asyncio.sleep(ceiling * random.uniform(0.5, 1.0))
