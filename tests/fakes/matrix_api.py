"""A protocol-faithful fake of the Matrix client-server API, enough for a real nio client.

Endpoints (spec v1.x, ``/_matrix/client/v3``): ``account/whoami``, ``profile/{user}/
displayname``, ``sync`` (long poll, ``since``/``full_state``/``timeout``), ``rooms/{room}/
send/{type}/{txn}`` (deduplicated per access token and transaction id, as the spec
requires), ``rooms/{room}/typing/{user}``, ``join/{room}``, ``rooms/{room}/leave``.
Errors use the spec's JSON bodies (``errcode``, ``error``, ``retry_after_ms``).

Recorded events are injected as partial /sync bodies (``{"rooms": {"join": {room:
{"timeline": {"events": [...]}}}}}``); each injection is one batch, and the token
``s<N>`` means "batches before N were delivered". A sync with ``since=s<N>`` answers batch
N (again and again until the client moves on, which is how a homeserver redelivers).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

ACCESS_TOKEN = "syt_Y2xhdw_fakeMatrixToken_Zq81x"
BOT = "@claw:example.org"
BOT_NAME = "Claw"
DEVICE = "CLAWDEVICE"


@dataclass
class Room:
    room_id: str
    members: dict[str, str]  # user id -> display name
    name: str | None = None
    power: dict[str, int] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)

    def state(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = [
            {"type": "m.room.create", "state_key": "", "sender": BOT,
             "event_id": f"$create-{self.room_id}", "origin_server_ts": 1, "content": {}},
            {"type": "m.room.power_levels", "state_key": "", "sender": BOT,
             "event_id": f"$power-{self.room_id}", "origin_server_ts": 2,
             "content": {"users": self.power, "users_default": 0}},
        ]  # fmt: skip
        if self.name:
            events.append({"type": "m.room.name", "state_key": "", "sender": BOT,
                           "event_id": f"$name-{self.room_id}", "origin_server_ts": 3,
                           "content": {"name": self.name}})  # fmt: skip
        for i, (user, display) in enumerate(self.members.items()):
            events.append({"type": "m.room.member", "state_key": user, "sender": user,
                           "event_id": f"$member-{i}-{self.room_id}", "origin_server_ts": 4,
                           "content": {"membership": "join", "displayname": display}})  # fmt: skip
        return events


def error(status: int, errcode: str, message: str, **extra: Any) -> web.Response:
    return web.json_response({"errcode": errcode, "error": message, **extra}, status=status)


def failure_for(status: int, retry_after: float | None = None) -> web.Response:
    """The homeserver's own answer for a failing send."""
    if status == 429:
        return error(429, "M_LIMIT_EXCEEDED", "Too Many Requests",
                     retry_after_ms=int((retry_after or 1) * 1000))
    if status == 403:
        return error(403, "M_FORBIDDEN", "You are not allowed to send messages in this room")
    return error(status, "M_UNKNOWN", "Internal server error")


class FakeMatrix:
    """The fake homeserver; ``start()`` binds 127.0.0.1 on a free port."""

    def __init__(self, rooms: list[Room]) -> None:
        self.rooms = {room.room_id: room for room in rooms}
        self.batches: list[dict[str, Any]] = []
        #: every accepted send: room id, event type, txn id, content, event id
        self.sent: list[dict[str, Any]] = []
        self.typing: list[tuple[str, bool]] = []
        #: the media repository: mxc URI -> (filename, content type, bytes)
        self.media: dict[str, tuple[str, str, bytes]] = {}
        #: join/leave/forget calls, as (action, room id)
        self.memberships: list[tuple[str, str]] = []
        self.syncs: list[dict[str, str]] = []
        self._txns: dict[tuple[str, str], str] = {}
        self._failures: list[web.Response] = []
        self.drop_after_accept = 0  # store this many sends, then drop the connection
        self._sync_failures: list[web.Response] = []
        self._changed = asyncio.Condition()
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def start(self) -> None:
        app = web.Application(middlewares=[self._auth])
        base = "/_matrix/client/v3"
        app.add_routes([
            web.get(f"{base}/account/whoami", self._whoami),
            web.get(f"{base}/profile/{{user}}/displayname", self._displayname),
            web.get(f"{base}/sync", self._sync),
            web.put(f"{base}/rooms/{{room}}/send/{{type}}/{{txn}}", self._send),
            web.put(f"{base}/rooms/{{room}}/typing/{{user}}", self._typing),
            web.post(f"{base}/join/{{room}}", self._join),
            web.post("/_matrix/media/v3/upload", self._upload),
            web.post(f"{base}/rooms/{{room}}/leave", self._membership),
            web.post(f"{base}/rooms/{{room}}/forget", self._membership),
        ])  # fmt: skip
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        async with self._changed:
            self._changed.notify_all()
        if self._runner is not None:
            await self._runner.cleanup()

    @web.middleware
    async def _auth(self, request: web.Request, handler: Any) -> web.StreamResponse:
        header = request.headers.get("Authorization", "")
        if header != f"Bearer {ACCESS_TOKEN}":
            return error(401, "M_UNKNOWN_TOKEN", "Invalid access token passed.")
        response: web.StreamResponse = await handler(request)
        return response

    # --- test controls
    async def enqueue(self, batch: dict[str, Any]) -> int:
        """Queue one partial /sync body; returns its batch index."""
        async with self._changed:
            self.batches.append(copy.deepcopy(batch))
            self._changed.notify_all()
            return len(self.batches) - 1

    def fail_next_send(self, response: web.Response) -> None:
        self._failures.append(response)

    def fail_next_sync(self, response: web.Response) -> None:
        self._sync_failures.append(response)

    # --- endpoints
    async def _whoami(self, request: web.Request) -> web.Response:
        return web.json_response({"user_id": BOT, "device_id": DEVICE})

    async def _displayname(self, request: web.Request) -> web.Response:
        return web.json_response({"displayname": BOT_NAME})

    async def _membership(self, request: web.Request) -> web.Response:
        self.memberships.append((request.path.rsplit("/", 1)[-1], request.match_info["room"]))
        return web.json_response({})

    async def _join(self, request: web.Request) -> web.Response:
        self.memberships.append(("join", request.match_info["room"]))
        return web.json_response({"room_id": request.match_info["room"]})

    async def _upload(self, request: web.Request) -> web.Response:
        """POST /_matrix/media/v3/upload?filename=: the body is the file."""
        data = await request.read()
        uri = f"mxc://fake.server/media{len(self.media) + 1}"
        self.media[uri] = (request.query.get("filename", ""),
                           request.headers.get("Content-Type", ""), data)
        return web.json_response({"content_uri": uri})

    async def _typing(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.typing.append((request.match_info["room"], bool(body.get("typing"))))
        return web.json_response({})

    async def _send(self, request: web.Request) -> web.Response:
        room, txn = request.match_info["room"], request.match_info["txn"]
        if room not in self.rooms:
            return error(403, "M_FORBIDDEN", "User not in room")
        if (ACCESS_TOKEN, txn) in self._txns:  # spec: same txn id -> same event, no new one
            return self._answer(request, self._txns[(ACCESS_TOKEN, txn)])
        if self._failures:
            return self._failures.pop(0)
        try:
            content = await request.json()
        except json.JSONDecodeError:
            return error(400, "M_NOT_JSON", "Content not JSON.")
        event_id = f"$sent{len(self.sent) + 1}"
        self._txns[(ACCESS_TOKEN, txn)] = event_id
        self.sent.append({"room_id": room, "type": request.match_info["type"], "txn": txn,
                          "content": content, "event_id": event_id})  # fmt: skip
        return self._answer(request, event_id)

    def _answer(self, request: web.Request, event_id: str) -> web.Response:
        if self.drop_after_accept > 0:
            self.drop_after_accept -= 1
            assert request.transport is not None
            request.transport.close()  # done, but the client never hears of it
        return web.json_response({"event_id": event_id})

    async def _sync(self, request: web.Request) -> web.Response:
        since = request.query.get("since")
        full_state = request.query.get("full_state") == "true"
        self.syncs.append(dict(request.query))
        if self._sync_failures:
            return self._sync_failures.pop(0)
        if since is None:  # initial sync: state, and history that is not news
            rooms = {
                room_id: {"state": {"events": room.state()},
                          "timeline": {"events": copy.deepcopy(room.history), "limited": False}}
                for room_id, room in self.rooms.items()
            }  # fmt: skip
            return web.json_response({"next_batch": f"s{len(self.batches)}",
                                      "rooms": {"join": rooms}})  # fmt: skip
        try:
            index = int(since.lstrip("s"))
        except ValueError:
            return error(400, "M_INVALID_PARAM", "Unknown since token")
        timeout = min(int(request.query.get("timeout", "0")), 30000) / 1000
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._changed.wait_for(lambda: len(self.batches) > index), timeout
                )
            ready = len(self.batches) > index
        body: dict[str, Any] = copy.deepcopy(self.batches[index]) if ready else {}
        body["next_batch"] = f"s{index + 1}" if ready else since
        if full_state:  # a restart: the client rebuilds its room state
            joined = body.setdefault("rooms", {}).setdefault("join", {})
            for room_id, room in self.rooms.items():
                joined.setdefault(room_id, {})["state"] = {"events": room.state()}
        return web.json_response(body)
