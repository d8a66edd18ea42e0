"""Matrix's /sync as the fetch of the shared receive loop (``channels.pull``: sink,
then the token; backoff; stall watchdog): sync, handle invites and kicks, normalize.

Promises, beyond the loop's:

* ``next_batch`` is the cursor of the whole sync: committed only after every message
  of that sync went through the sink, so a restart resumes exactly there.
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
* ``M_LIMIT_EXCEEDED`` waits what the homeserver asked; a refused token stops the
  loop with one clear log line; other refusals back off.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from nio import AsyncClient, MegolmEvent, RoomMessagesResponse, SyncError, SyncResponse

from channels.base import CursorStore, InboundSink
from channels.errors import PermanentError, RateLimited
from channels.matrix.errors import NETWORK_ERRORS, map_error
from channels.matrix.normalize import BotIdentity, RoomView, normalize_event
from channels.matrix.settings import MatrixSettings
from channels.pull import Batch, Item, PullLoop

log = logging.getLogger(__name__)

TOKEN_KEY = "next_batch"  # noqa: S105 (a cursor name)
#: read-back bound after a long absence: pages of ``timeline_limit`` events per room
MAX_BACKFILL_PAGES = 50
#: seconds a sync may take beyond its long-poll timeout (nio's request timeout, too)
SYNC_GRACE = 30


class BackfillFailed(Exception):
    """/messages refused while reading back a room's missed events."""


class SyncRefused(Exception):
    """The homeserver answered /sync with an error that a retry may cure."""


def room_view(client: AsyncClient, room_id: str) -> RoomView:
    """The normalization view of a room nio tracks (members from state, not names)."""
    room = client.rooms.get(room_id)
    if room is None:
        return RoomView(room_id, None, 0)
    names = {uid: user.display_name or uid for uid, user in room.users.items()}
    power = {uid: room.power_levels.get_user_level(uid) for uid in room.users}
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
    """The /sync fetch of one bot account, and its receive loop (``loop``: its ``ready``
    is set once the first sync went through, ``fatal`` once the homeserver refused the
    bot for good)."""

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
        self._account = account
        #: rooms already reported as unreadable (encrypted without keys or support)
        self.reported: set[str] = set()
        self.loop = PullLoop(
            self._fetch, sink, cursors, TOKEN_KEY,
            backoff=settings.backoff(),
            stall_after=settings.sync_timeout + SYNC_GRACE, log=log, name="matrix",
        )
        #: room key requests in flight: the loop keeps only a weak reference to a task
        self._asks: set[asyncio.Task[None]] = set()

    def __repr__(self) -> str:
        return f"Syncer(account={self._account!r}, failures={self.loop.failures})"

    async def _fetch(self, token: str | None) -> Batch:
        """One sync after ``token``: membership handled, its messages as one batch."""
        first = not self.loop.ready.is_set()  # set once the first sync went through
        if not first:
            await self._e2e_housekeeping()  # between syncs, as nio's sync_forever does
        response = await self._sync(token, first)
        await self._membership(response)
        if first and token is None:  # the initial sync is history, not news
            return Batch(cursor=response.next_batch)
        return Batch(await self._items(response, token), cursor=response.next_batch)

    async def _sync(self, token: str | None, first: bool) -> SyncResponse:
        # nio skips a response whose next_batch it has seen (a re-sync after a failure
        # would then not be decrypted): let it see our cursor as its position
        self._client.next_batch = token
        response = await self._client.sync(
            timeout=0 if first else self._settings.sync_timeout * 1000, since=token,
            # a restart rebuilds room state (members, names are not kept between runs)
            full_state=first or None,
            sync_filter={"room": {"timeline": {"limit": self._settings.timeline_limit}}},
        )
        if isinstance(response, SyncResponse):
            return response
        refused = map_error(response) if isinstance(response, SyncError) else None
        if isinstance(refused, RateLimited):
            raise refused
        if isinstance(refused, PermanentError) and refused.reason == "unauthorized":
            raise PermanentError("unauthorized", "the homeserver refused the access token. "
                                 "Log in again (delete the session file) or set a new token.")
        raise SyncRefused(str(refused or type(response).__name__))

    async def _items(self, response: SyncResponse, token: str | None) -> list[Item]:
        """Every message of the sync in order (rooms read back where it was ``limited``)."""
        items: list[Item] = []
        for room_id, info in response.rooms.join.items():
            events = list(info.timeline.events)
            start = _joined_at(events, self._identity.user_id)
            if info.timeline.limited and token is not None and start == 0:
                events = await self._backfill(room_id, info.timeline.prev_batch, token) + events
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
                if inbound is not None:
                    items.append(Item(inbound))
        return items

    async def _backfill(self, room_id: str, prev_batch: str | None, token: str) -> list[Any]:
        """The events between the stored token and the start of a ``limited`` timeline
        (more arrived than one sync carries), oldest first, read back with /messages."""
        older: list[Any] = []
        cursor = prev_batch
        for _ in range(MAX_BACKFILL_PAGES):
            if cursor is None:
                break
            page = await self._client.room_messages(
                room_id, start=cursor, end=token, limit=self._settings.timeline_limit
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

        task = asyncio.get_running_loop().create_task(ask())
        self._asks.add(task)
        task.add_done_callback(self._asks.discard)

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
        except NETWORK_ERRORS as error:
            log.warning("matrix: key exchange failed (%s); retried after the next sync",
                        type(error).__name__)
