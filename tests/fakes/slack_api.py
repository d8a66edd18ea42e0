"""A local fake of Slack's Web API and Socket Mode websocket, on 127.0.0.1.

It speaks the real wire shapes so the unmodified slack_sdk runs against it:

* Web API: ``POST/GET /api/<method>`` with ``Authorization: Bearer <token>``,
  answering HTTP 200 ``{"ok": true, ...}`` or ``{"ok": false, "error": "<code>"}``,
  and HTTP 429 with ``Retry-After`` plus ``{"ok": false, "error": "ratelimited"}``.
  Methods: auth.test, chat.postMessage (keeping ``metadata``), users.info,
  apps.connections.open, conversations.history and conversations.replies (newest
  first / thread oldest first, ``oldest``, ``limit``; ``metadata`` only with
  ``include_all_metadata``). ``drop_after_accept(method)``: the next call takes effect,
  then the connection closes without an answer; ``answer_late(method, seconds)``: it
  takes effect and is answered that much later (after a client's read timeout).
* Socket Mode: apps.connections.open (app-level token) returns a ``ws://`` URL; on
  connect the server sends ``{"type": "hello", ...}``; events go out as
  ``{"type": "events_api", "envelope_id": ..., "payload": <event_callback>,
  "accepts_response_payload": false, "retry_attempt": 0, "retry_reason": ""}``; the
  client acks with ``{"envelope_id": ...}``.

Also signs requests the way Slack does for the HTTP Events API (``signed_headers``).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.fakes.files import FileShelf

BOT_TOKEN = "xoxb-test-bot-token-0123456789"
APP_TOKEN = "xapp-1-test-app-token-0123456789"
SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
BOT_USER_ID = "U0BOT0001"
BOT_NAME = "claw"
TEAM_ID = "T0TEAM001"


def signed_headers(
    body: bytes, secret: str = SIGNING_SECRET, timestamp: int | None = None
) -> dict[str, str]:
    """Headers Slack sends with an Events API request: ``v0=HMAC-SHA256(secret,
    "v0:<ts>:<body>")`` (https://docs.slack.dev/authentication/verifying-requests-from-slack)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    base = b"v0:" + ts.encode() + b":" + body
    digest = hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": f"v0={digest}",
    }


def event_callback(event: dict[str, Any], event_id: str | None = None) -> dict[str, Any]:
    """The outer Events API envelope, as Slack sends it over HTTP and inside Socket Mode."""
    return {
        "token": "deprecated-verification-token",
        "team_id": TEAM_ID,
        "api_app_id": "A0APP0001",
        "event": event,
        "type": "event_callback",
        "event_id": event_id or f"Ev{uuid.uuid4().hex[:10].upper()}",
        "event_time": int(time.time()),
        "authorizations": [{"team_id": TEAM_ID, "user_id": BOT_USER_ID, "is_bot": True}],
        "is_ext_shared_channel": False,
    }


@dataclass
class Failure:
    """A canned failure for the next call of one method."""

    error: str = ""
    status: int = 200
    retry_after: int | None = None


@dataclass
class FakeSlack:
    """The fake server; ``await start()`` then point ``api_base_url`` at ``base_url``."""

    bot_token: str = field(default=BOT_TOKEN, repr=False)
    app_token: str = field(default=APP_TOKEN, repr=False)
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: accepted chat.postMessage calls (the request params plus the assigned ts)
    posted: list[dict[str, Any]] = field(default_factory=list)
    #: every Web API call: (method, params)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: acks received over Socket Mode, in order
    acks: list[str] = field(default_factory=list)
    failures: dict[str, list[Failure]] = field(default_factory=dict)
    #: False: swallow websocket pings, as a stalled connection would
    answer_pings: bool = True

    def __post_init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._sockets: list[web.WebSocketResponse] = []
        self._ts = itertools.count(1)
        self._ack_cond = asyncio.Condition()
        self._connected = asyncio.Event()
        self.connections = 0
        self._drops: dict[str, int] = {}
        self._late: dict[str, float] = {}
        self._uploads: dict[str, dict[str, Any]] = {}
        #: files shared by files.completeUploadExternal: file_id, channel, name, title,
        #: data, initial_comment, thread_ts
        self.shared_files: list[dict[str, Any]] = []
        #: files behind ``url_private`` (``file_url``), served with the bot token only
        self.files = FileShelf(BOT_TOKEN)

    # -- server life cycle -----------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}/api/"

    def file_url(self, file_id: str, name: str) -> str:
        """A file's ``url_private`` on this fake (Slack: files.slack.com/files-pri/)."""
        return f"http://127.0.0.1:{self._port}/files-pri/T0TEAM001-{file_id}/{name}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_get("/link/", self._socket)
        app.router.add_post("/upload/{file_id}", self._upload)
        app.router.add_get("/files-pri/{slug}/{name}",
                           lambda r: self.files.serve(r, r.match_info["slug"]))
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        for ws in list(self._sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def fail_next(self, method: str, failure: Failure) -> None:
        self.failures.setdefault(method, []).append(failure)

    def drop_after_accept(self, method: str, times: int = 1) -> None:
        self._drops[method] = self._drops.get(method, 0) + times

    def answer_late(self, method: str, seconds: float) -> None:
        """The next ``method`` call takes effect now and is answered ``seconds`` later."""
        self._late[method] = seconds

    # -- Web API -----------------------------------------------------------------

    async def _params(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            if request.content_type == "application/json":
                body = await request.json()
                if isinstance(body, dict):
                    params.update(body)
            else:
                params.update(dict(await request.post()))
        return params

    def _token(self, request: web.Request) -> str | None:
        header = request.headers.get("Authorization", "")
        return header[len("Bearer ") :] if header.startswith("Bearer ") else None

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._params(request)
        self.calls.append((method, params))
        token = self._token(request)
        wanted = self.app_token if method == "apps.connections.open" else self.bot_token
        if token is None:
            return web.json_response({"ok": False, "error": "not_authed"})
        if not hmac.compare_digest(token, wanted):
            return web.json_response({"ok": False, "error": "invalid_auth"})
        queued = self.failures.get(method)
        if queued:
            failure = queued.pop(0)
            headers = {}
            if failure.retry_after is not None:
                headers["Retry-After"] = str(failure.retry_after)
            error = failure.error or ("ratelimited" if failure.status == 429 else "internal_error")
            return web.json_response(
                {"ok": False, "error": error}, status=failure.status, headers=headers
            )
        handler = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._post_message,
            "users.info": self._users_info,
            "apps.connections.open": self._connections_open,
            "conversations.history": self._history,
            "conversations.replies": self._replies,
            "files.getUploadURLExternal": self._upload_url,
            "files.completeUploadExternal": self._complete_upload,
        }.get(method)
        if handler is None:
            return web.json_response({"ok": False, "error": "unknown_method"})
        answer = handler(params)
        if self._drops.get(method, 0) > 0:
            self._drops[method] -= 1
            assert request.transport is not None
            request.transport.close()  # done, but the client never hears of it
        late = self._late.pop(method, 0.0)
        if late:
            await asyncio.sleep(late)
        return web.json_response(answer)

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        return {
            "ok": True,
            "url": "https://fake-workspace.slack.com/",
            "team": "Fake Workspace",
            "user": BOT_NAME,
            "team_id": TEAM_ID,
            "user_id": BOT_USER_ID,
            "bot_id": "B0BOT0001",
            "is_enterprise_install": False,
        }

    def _users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        user = self.users.get(str(params.get("user")))
        if user is None:
            return {"ok": False, "error": "user_not_found"}
        return {"ok": True, "user": user}

    def _connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        ticket = uuid.uuid4().hex
        return {
            "ok": True,
            "url": f"ws://127.0.0.1:{self._port}/link/?ticket={ticket}&app_id=A0APP0001",
        }

    def _post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        channel = params.get("channel")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        blocks = params.get("blocks")
        if isinstance(blocks, str):  # form-encoded callers send JSON text
            blocks = json.loads(blocks)
        if blocks is not None and (
            not isinstance(blocks, list) or not all(_valid_block(b) for b in blocks)
        ):
            return {"ok": False, "error": "invalid_blocks"}
        text = params.get("text")
        if not text and not blocks:
            return {"ok": False, "error": "no_text"}
        ts = f"{int(time.time())}.{next(self._ts):06d}"
        record = dict(params, ts=ts)
        self.posted.append(record)
        message = {"type": "message", "user": BOT_USER_ID, "text": text or "", "ts": ts}
        if params.get("thread_ts"):
            message["thread_ts"] = params["thread_ts"]
        metadata = params.get("metadata")
        if isinstance(metadata, str):  # form-encoded callers send JSON text
            metadata = json.loads(metadata)
        if metadata is not None:
            record["metadata"] = metadata
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    # -- files_upload_v2: getUploadURLExternal, POST the bytes, completeUploadExternal

    def _upload_url(self, params: dict[str, Any]) -> dict[str, Any]:
        filename, length = params.get("filename"), str(params.get("length", ""))
        if not filename or not length.isdigit():
            return {"ok": False, "error": "invalid_arguments"}
        file_id = f"F{next(self._ts):09d}"
        self._uploads[file_id] = {"filename": filename, "length": int(length), "data": None}
        return {"ok": True, "file_id": file_id,
                "upload_url": f"http://127.0.0.1:{self._port}/upload/{file_id}"}

    async def _upload(self, request: web.Request) -> web.Response:
        upload = self._uploads.get(request.match_info["file_id"])
        data = await request.read()
        if upload is None or len(data) != upload["length"]:
            return web.Response(status=400, text="bad upload")
        upload["data"] = data
        return web.Response(text=f"OK - {len(data)}")

    def _complete_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        files = params.get("files")
        listed = json.loads(files) if isinstance(files, str) else files
        if not isinstance(listed, list) or not listed:
            return {"ok": False, "error": "invalid_arguments"}
        done = []
        for item in listed:
            upload = self._uploads.get(str(item.get("id")))
            if upload is None or upload["data"] is None:
                return {"ok": False, "error": "file_not_found"}
            self.shared_files.append({
                "file_id": item["id"], "channel": params.get("channel_id"),
                "name": upload["filename"], "title": item.get("title"),
                "data": upload["data"], "initial_comment": params.get("initial_comment", ""),
                "thread_ts": params.get("thread_ts")})
            done.append({"id": item["id"], "name": upload["filename"],
                         "title": item.get("title")})
        return {"ok": True, "files": done}

    def _message(self, record: dict[str, Any], with_metadata: bool) -> dict[str, Any]:
        message = {"type": "message", "user": BOT_USER_ID, "text": record.get("text") or "",
                   "ts": record["ts"]}
        if record.get("thread_ts"):
            message["thread_ts"] = record["thread_ts"]
        if with_metadata and record.get("metadata") is not None:
            message["metadata"] = record["metadata"]
        return message

    def _listing(self, params: dict[str, Any], records: list[dict[str, Any]],
                 newest_first: bool) -> dict[str, Any]:
        oldest = float(params.get("oldest") or 0)
        limit = int(params.get("limit") or 100)
        with_metadata = str(params.get("include_all_metadata")).lower() in ("true", "1")
        chosen = [r for r in records if float(r["ts"]) > oldest]
        chosen = list(reversed(chosen)) if newest_first else chosen
        return {"ok": True, "has_more": len(chosen) > limit,
                "messages": [self._message(r, with_metadata) for r in chosen[:limit]]}

    def _history(self, params: dict[str, Any]) -> dict[str, Any]:
        """The channel's top-level messages (the bot's posts here), newest first."""
        channel = params.get("channel")
        records = [r for r in self.posted if r.get("channel") == channel
                   and not r.get("thread_ts")]
        return self._listing(params, records, newest_first=True)

    def _replies(self, params: dict[str, Any]) -> dict[str, Any]:
        """A thread's replies (the bot's posts under ``ts``), oldest first."""
        channel, thread = params.get("channel"), params.get("ts")
        records = [r for r in self.posted if r.get("channel") == channel
                   and r.get("thread_ts") == thread]
        return self._listing(params, records, newest_first=False)

    # -- Socket Mode -----------------------------------------------------------------

    async def _socket(self, request: web.Request) -> web.WebSocketResponse:
        if not request.query.get("ticket"):
            raise web.HTTPUnauthorized()
        ws = web.WebSocketResponse(autoping=self.answer_pings)
        await ws.prepare(request)
        self._sockets.append(ws)
        self.connections += 1
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": len(self._sockets),
                "debug_info": {"host": "applink-fake", "approximate_connection_time": 18060},
                "connection_info": {"app_id": "A0APP0001"},
            }
        )
        self._connected.set()
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    continue
                data = json.loads(msg.data)
                if isinstance(data, dict) and "envelope_id" in data:
                    async with self._ack_cond:
                        self.acks.append(str(data["envelope_id"]))
                        self._ack_cond.notify_all()
        finally:
            self._sockets.remove(ws)
        return ws

    async def wait_connected(self, timeout: float = 10, count: int = 1) -> None:
        """Wait until ``count`` websocket connections were opened in total."""
        while self.connections < count:
            self._connected.clear()
            await asyncio.wait_for(self._connected.wait(), timeout)

    async def send_disconnect(self, reason: str = "refresh_requested") -> None:
        """Slack's polite request to reconnect (sent before it recycles a socket)."""
        await self._sockets[-1].send_json(
            {"type": "disconnect", "reason": reason,
             "debug_info": {"host": "applink-fake"}}
        )

    async def drop_connections(self) -> None:
        """Close every socket from the server side, as a network drop or deploy would."""
        for ws in list(self._sockets):
            await ws.close()

    async def push_event(
        self, event: dict[str, Any], *, event_id: str | None = None, retry_attempt: int = 0
    ) -> str:
        """Send one events_api envelope to the newest connection; returns its envelope_id."""
        return await self.push_envelope(
            "events_api", event_callback(event, event_id), retry_attempt=retry_attempt
        )

    async def push_envelope(
        self, kind: str, payload: dict[str, Any], *, retry_attempt: int = 0
    ) -> str:
        """Send one envelope of any type (``events_api``, ``interactive``,
        ``slash_commands``) to the newest connection; returns its envelope_id."""
        if not self._sockets:
            raise RuntimeError("no Socket Mode client connected")
        envelope_id = str(uuid.uuid4())
        await self._sockets[-1].send_json(
            {
                "envelope_id": envelope_id,
                "payload": payload,
                "type": kind,
                "accepts_response_payload": kind != "events_api",
                "retry_attempt": retry_attempt,
                "retry_reason": "" if retry_attempt == 0 else "timeout",
            }
        )
        return envelope_id

    async def wait_ack(self, envelope_id: str, timeout: float = 10) -> None:
        async with self._ack_cond:
            await asyncio.wait_for(
                self._ack_cond.wait_for(lambda: envelope_id in self.acks), timeout
            )


def _valid_block(block: Any) -> bool:
    """Enough of Block Kit's validation for a section block: mrkdwn/plain_text, <=3000."""
    if not isinstance(block, dict) or block.get("type") != "section":
        return False
    text = block.get("text")
    return (
        isinstance(text, dict)
        and text.get("type") in ("mrkdwn", "plain_text")
        and isinstance(text.get("text"), str)
        and 0 < len(text["text"]) <= 3000
    )


def channel_block(fake: FakeSlack, mode: str = "socket", **extra: Any) -> dict[str, Any]:
    """A ``[channels.slack]`` config block pointing the adapter at ``fake``."""
    return {"mode": mode, "api_base_url": fake.base_url, "ping_interval": 1.0, **extra}


def channel_env() -> dict[str, str]:
    return {
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_APP_TOKEN": APP_TOKEN,
        "SLACK_SIGNING_SECRET": SIGNING_SECRET,
    }


def message_event(
    text: str,
    *,
    channel: str = "C0GENERAL1",
    ts: str = "1700000000.000100",
    user: str = "U0ALICE01",
    kind: str = "message",
    channel_type: str | None = "channel",
    **extra: Any,
) -> dict[str, Any]:
    """A ``message`` (or ``app_mention``) event as Slack sends it, with rich_text blocks
    mirroring the text's ``<@U…>`` mention tokens."""
    import re

    elements: list[dict[str, Any]] = []
    pos = 0
    for match in re.finditer(r"<@([A-Z0-9]+)>", text):
        if match.start() > pos:
            elements.append({"type": "text", "text": text[pos : match.start()]})
        elements.append({"type": "user", "user_id": match.group(1)})
        pos = match.end()
    if pos < len(text):
        elements.append({"type": "text", "text": text[pos:]})
    event: dict[str, Any] = {
        "type": kind,
        "user": user,
        "text": text,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
        "team": TEAM_ID,
        "client_msg_id": str(uuid.uuid5(uuid.NAMESPACE_URL, channel + ts)),
        "blocks": [
            {
                "type": "rich_text",
                "block_id": "b1",
                "elements": [{"type": "rich_text_section", "elements": elements}],
            }
        ],
    }
    if kind == "message" and channel_type is not None:
        event["channel_type"] = channel_type
    event.update(extra)
    return event
