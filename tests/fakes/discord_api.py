"""A local, protocol-faithful fake of Discord's REST API and gateway websocket.

The real ``discord.py`` client runs unmodified against it: its REST base URL
(``discord.http.Route.BASE``) and gateway URL (``DiscordWebSocket.DEFAULT_GATEWAY``)
are pointed at this server. Payload shapes follow the Discord developer docs
(API v10): users, applications, channels, messages, the gateway's HELLO / IDENTIFY /
READY / DISPATCH / HEARTBEAT / HEARTBEAT_ACK / RESUME / RESUMED / INVALID_SESSION
opcodes, close codes 4004 (authentication failed) and 4014 (disallowed intents), and
``zlib-stream`` transport compression (one zlib context per connection, every frame
ended with ``Z_SYNC_FLUSH``), which is what discord.py asks for when ``zstandard``
is not installed (with it installed, ``zstd-stream``, also served). A non-sharded
discord.py ``Client`` always asks for compression, so there is no uncompressed path.

Tests drive it: ``dispatch_message`` pushes a MESSAGE_CREATE to every session,
``fail_next`` queues canned error responses for a REST route, ``drop_connections``
kills the websockets so the client must reconnect (and resume), ``drop_after_accept``
creates the next messages and then closes the connection without an answer (what a
reset after the request was written looks like). Create Message honours ``nonce`` with
``enforce_nonce`` as documented: the same author's same nonce returns the message it
created instead of a new one (Discord checks "the past few minutes"; the fake keeps
them for its lifetime, longer than any test).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import BodyPartReader, WSMsgType, web

from tests.fakes.files import FileShelf

API_PREFIX = "/api/v10"

# Gateway intents bits (developer docs, "Gateway Intents").
INTENT_GUILDS = 1 << 0
INTENT_GUILD_MESSAGES = 1 << 9
INTENT_DIRECT_MESSAGES = 1 << 12
INTENT_MESSAGE_CONTENT = 1 << 15
PRIVILEGED_INTENTS = (1 << 1) | (1 << 8) | INTENT_MESSAGE_CONTENT

_snowflakes = itertools.count(1_300_000_000_000_000_000)


def snowflake() -> str:
    return str(next(_snowflakes))


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


def json_response(
    body: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """Discord answers ``Content-Type: application/json`` with no charset parameter,
    and discord.py only parses the body as JSON on that exact value."""
    return web.Response(
        body=json.dumps(body).encode(),
        status=status,
        headers={**(headers or {}), "Content-Type": "application/json"},
    )


def drop_connection(request: web.Request) -> web.Response:
    """Close the connection without answering: the client sees it drop after its
    request was written (and acted on). The returned response is never written."""
    assert request.transport is not None
    request.transport.close()
    return web.Response(status=204)


def user_json(user_id: str, username: str, *, bot: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": user_id,
        "username": username,
        "discriminator": "0",
        "global_name": username.title(),
        "avatar": None,
        "public_flags": 0,
    }
    if bot:
        data["bot"] = True
    return data


Compressor = Callable[[bytes], bytes]


def _zlib_stream() -> Compressor:
    """One zlib context per connection; each gateway message ends with Z_SYNC_FLUSH
    (``00 00 ff ff``), which is how discord.py finds message boundaries."""
    context = zlib.compressobj()

    def frame(data: bytes) -> bytes:
        return context.compress(data) + context.flush(zlib.Z_SYNC_FLUSH)

    return frame


_COMPRESSORS: dict[str, Callable[[], Compressor]] = {"zlib-stream": _zlib_stream}

try:  # discord.py asks for zstd-stream instead whenever ``zstandard`` is installed
    import zstandard

    def _zstd_stream() -> Compressor:
        context = zstandard.ZstdCompressor().compressobj()

        def frame(data: bytes) -> bytes:
            out: bytes = context.compress(data) + context.flush(
                zstandard.COMPRESSOBJ_FLUSH_BLOCK
            )
            return out

        return frame

    _COMPRESSORS["zstd-stream"] = _zstd_stream
except ImportError:
    pass


@dataclass
class CannedError:
    status: int
    body: dict[str, Any] | str
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Session:
    session_id: str
    seq: int = 0
    # every dispatched event, so a RESUME can replay what the client missed
    log: list[dict[str, Any]] = field(default_factory=list)
    ws: web.WebSocketResponse | None = None
    compressor: Compressor | None = None


class FakeDiscord:
    """One bot application, its guilds, channels and threads, and what it was sent."""

    def __init__(
        self,
        token: str = "fake-bot-token",
        *,
        heartbeat_interval_ms: int = 41250,
        message_content_enabled: bool = True,
        bot_id: str | None = None,
    ) -> None:
        self.token = token
        self.heartbeat_interval_ms = heartbeat_interval_ms
        # Mirrors the developer portal switch for the privileged Message Content intent.
        self.message_content_enabled = message_content_enabled
        self.bot = user_json(bot_id or snowflake(), "clawbot", bot=True)
        self.application_id = self.bot["id"]
        self.owner = user_json(snowflake(), "owner")
        self.guilds: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        self.sent: list[dict[str, Any]] = []  # POSTed messages, as stored
        self.messages: dict[str, dict[str, Any]] = {}  # every message that exists
        self.requests: list[tuple[str, str]] = []  # (method, path) of every REST call
        self.typing: list[str] = []
        self.drop_after_accept = 0  # create this many messages, then drop the connection
        self._nonces: dict[tuple[str, str], dict[str, Any]] = {}  # (author, nonce) -> msg
        #: files attached to created messages: channel_id, message_id, name, data, content
        self.files_sent: list[dict[str, Any]] = []
        self._attachment_ids = itertools.count(1_300_000_000_000_000_000)
        self.identifies: list[dict[str, Any]] = []
        self.resumes: list[dict[str, Any]] = []
        self.heartbeats = 0
        self.ack_heartbeats = True
        self.refuse_gateway = 0  # answer this many upgrade attempts with 503
        # the token was reset in the portal after REST login: IDENTIFY gets 4004
        self.gateway_rejects_token = False
        self.auth_headers: list[str] = []
        self._failures: dict[tuple[str, str], list[CannedError]] = {}
        self._sessions: dict[str, Session] = {}
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.connected = asyncio.Event()
        #: attachment files on the fake CDN (``cdn_url``); no token, as Discord's CDN
        self.cdn = FileShelf()

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        app = web.Application()
        p = API_PREFIX
        app.router.add_get(f"{p}/users/@me", self._users_me)
        app.router.add_get(f"{p}/oauth2/applications/@me", self._application)
        app.router.add_get(f"{p}/gateway", self._gateway)
        app.router.add_get(f"{p}/gateway/bot", self._gateway_bot)
        app.router.add_get(f"{p}/channels/{{channel_id}}", self._get_channel)
        app.router.add_post(f"{p}/channels/{{channel_id}}/messages", self._post_message)
        app.router.add_get(f"{p}/channels/{{channel_id}}/messages", self._get_messages)
        app.router.add_post(f"{p}/channels/{{channel_id}}/typing", self._post_typing)
        app.router.add_get("/gateway", self._ws)
        app.router.add_get("/attachments/{channel_id}/{id}/{name}",
                           lambda r: self.cdn.serve(r, r.match_info["id"]))
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        await self.drop_connections()
        if self._runner is not None:
            await self._runner.cleanup()

    def cdn_url(self, channel_id: str, attachment_id: str, name: str) -> str:
        """An attachment's URL on this fake's CDN (Discord: cdn.discordapp.com)."""
        return (f"http://127.0.0.1:{self.port}/attachments/{channel_id}/{attachment_id}/"
                f"{name}?ex=6749a1b0&is=67485030&hm=0f3c")

    @property
    def base_url(self) -> str:
        """What a config's ``api_base_url`` points at (no ``/api/v10`` suffix)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def gateway_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/gateway"

    # ------------------------------------------------------------------ world
    def add_guild(self, name: str = "Claw Lab", *, id: str | None = None) -> dict[str, Any]:
        """A guild with @everyone, the bot's managed role and an "admins" role; with a
        fixed ``id`` the two extra roles get ``id + 1`` and ``id + 2`` (for fixtures)."""
        gid = id or snowflake()
        bot_role = str(int(gid) + 1) if id else snowflake()
        admin_role = str(int(gid) + 2) if id else snowflake()
        guild = {
            "id": gid,
            "name": name,
            "icon": None,
            "owner_id": self.owner["id"],
            "afk_timeout": 300,
            "verification_level": 0,
            "default_message_notifications": 0,
            "explicit_content_filter": 0,
            "mfa_level": 0,
            "nsfw_level": 0,
            "premium_tier": 0,
            "preferred_locale": "en-US",
            "features": [],
            "emojis": [],
            "stickers": [],
            "roles": [
                {
                    "id": gid,  # @everyone shares the guild's id
                    "name": "@everyone",
                    "permissions": str((1 << 10) | (1 << 11) | (1 << 16) | (1 << 38)),
                    "position": 0,
                    "color": 0,
                    "hoist": False,
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                },
                {
                    # the role Discord creates for a bot when it joins ("managed")
                    "id": bot_role,
                    "name": "clawbot",
                    "permissions": str((1 << 11) | (1 << 16) | (1 << 38)),
                    "position": 1,
                    "color": 0,
                    "hoist": False,
                    "managed": True,
                    "mentionable": True,
                    "flags": 0,
                    "tags": {"bot_id": self.bot["id"]},
                },
                {
                    "id": admin_role,
                    "name": "admins",
                    "permissions": str(1 << 3),  # ADMINISTRATOR
                    "position": 2,
                    "color": 0,
                    "hoist": False,
                    "managed": False,
                    "mentionable": False,
                    "flags": 0,
                },
            ],
            "joined_at": now_iso(),
            "large": False,
            "unavailable": False,
            "member_count": 3,
            "members": [],
            "voice_states": [],
            "presences": [],
            "channels": [],
            "threads": [],
            "stage_instances": [],
            "guild_scheduled_events": [],
            "soundboard_sounds": [],
        }
        self.guilds[gid] = guild
        return guild

    @staticmethod
    def role(guild: dict[str, Any], name: str) -> dict[str, Any]:
        return next(r for r in guild["roles"] if r["name"] == name)

    def add_text_channel(
        self, guild: dict[str, Any], name: str = "general", *, id: str | None = None
    ) -> dict[str, Any]:
        channel = {
            "id": id or snowflake(),
            "type": 0,
            "guild_id": guild["id"],
            "name": name,
            "position": len(guild["channels"]),
            "permission_overwrites": [],
            "parent_id": None,
            "nsfw": False,
            "topic": None,
            "last_message_id": None,
            "rate_limit_per_user": 0,
        }
        guild["channels"].append({k: v for k, v in channel.items() if k != "guild_id"})
        self.channels[channel["id"]] = channel
        return channel

    def add_thread(
        self,
        parent: dict[str, Any],
        name: str = "design talk",
        *,
        announce: bool = True,
        id: str | None = None,
    ) -> dict[str, Any]:
        """An active public thread; ``announce=False`` keeps it out of GUILD_CREATE so
        the client only learns about it through GET /channels/{id}."""
        thread = {
            "id": id or snowflake(),
            "type": 11,
            "guild_id": parent["guild_id"],
            "parent_id": parent["id"],
            "owner_id": self.owner["id"],
            "name": name,
            "last_message_id": None,
            "rate_limit_per_user": 0,
            "message_count": 0,
            "member_count": 1,
            "total_message_sent": 0,
            "flags": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": now_iso(),
                "locked": False,
            },
        }
        if announce:
            self.guilds[parent["guild_id"]]["threads"].append(thread)
        self.channels[thread["id"]] = thread
        return thread

    def add_dm(self, recipient: dict[str, Any], *, id: str | None = None) -> dict[str, Any]:
        channel: dict[str, Any] = {
            "id": id or snowflake(),
            "type": 1,
            "last_message_id": None,
            "recipients": [recipient],
        }
        self.channels[channel["id"]] = channel
        return channel

    def message_json(
        self,
        channel: dict[str, Any],
        author: dict[str, Any],
        content: str,
        *,
        mentions: list[dict[str, Any]] | None = None,
        mention_roles: list[str] | None = None,
        reply_to: dict[str, Any] | None = None,
        attachments: list[dict[str, Any]] | None = None,
        member: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A MESSAGE_CREATE ``d`` payload as Discord sends it (v10)."""
        msg: dict[str, Any] = {
            "id": snowflake(),
            "type": 19 if reply_to else 0,
            "channel_id": channel["id"],
            "author": author,
            "content": content,
            "timestamp": now_iso(),
            "edited_timestamp": None,
            "tts": False,
            "mention_everyone": False,
            "mentions": mentions or [],
            "mention_roles": mention_roles or [],
            "attachments": attachments or [],
            "embeds": [],
            "pinned": False,
            "flags": 0,
            "components": [],
        }
        if "guild_id" in channel:
            msg["guild_id"] = channel["guild_id"]
            msg["member"] = member or {
                "roles": [],
                "joined_at": now_iso(),
                "deaf": False,
                "mute": False,
                "flags": 0,
                "nick": None,
            }
            # MESSAGE_CREATE mentions carry a partial member for guild messages
            for m in msg["mentions"]:
                m.setdefault(
                    "member",
                    {"roles": [], "joined_at": now_iso(), "deaf": False, "mute": False, "flags": 0},
                )
        self.messages[msg["id"]] = msg
        if reply_to is not None:
            ref: dict[str, Any] = {
                "type": 0,
                "message_id": reply_to["id"],
                "channel_id": reply_to["channel_id"],
            }
            if "guild_id" in channel:
                ref["guild_id"] = channel["guild_id"]
            msg["message_reference"] = ref
            msg["referenced_message"] = {
                k: v for k, v in reply_to.items() if k not in ("member", "referenced_message")
            }
        return msg

    # ------------------------------------------------------------------ control
    def fail_next(
        self,
        method: str,
        channel_id: str,
        status: int,
        body: dict[str, Any] | str,
        headers: dict[str, str] | None = None,
        *,
        route: str = "messages",
    ) -> None:
        """Answer the next ``method`` on ``/channels/{channel_id}/{route}`` with an error
        (``route=""``: the channel itself, ``GET /channels/{channel_id}``); a ``str``
        body is sent as an HTML page, the way Cloudflare answers."""
        key = (method, f"{channel_id}/{route}".rstrip("/"))
        self._failures.setdefault(key, []).append(CannedError(status, body, headers or {}))

    def fail_rate_limited(self, channel_id: str, retry_after: float) -> None:
        """A per-route 429 exactly as Discord answers it behind Cloudflare."""
        self.fail_next(
            "POST",
            channel_id,
            429,
            {"message": "You are being rate limited.", "retry_after": retry_after, "global": False},
            {
                "Retry-After": str(max(1, int(retry_after + 0.999))),
                "X-RateLimit-Limit": "5",
                "X-RateLimit-Remaining": "0",
                "X-RateLimit-Reset-After": str(retry_after),
                "X-RateLimit-Bucket": "fake-messages-bucket",
                "X-RateLimit-Scope": "user",
                "Via": "1.1 google",
            },
        )

    async def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Send a DISPATCH to every session (buffered for resume while disconnected)."""
        for session in self._sessions.values():
            session.seq += 1
            payload = {"op": 0, "t": event, "s": session.seq, "d": data}
            session.log.append(payload)
            if session.ws is not None and not session.ws.closed:
                await self._send(session, payload)

    async def dispatch_message(self, data: dict[str, Any]) -> None:
        await self.dispatch("MESSAGE_CREATE", data)

    async def invalidate_sessions(self) -> None:
        """Drop every connection and forget the sessions: the client's RESUME gets
        INVALID_SESSION (op 9, not resumable) and events in the gap are gone."""
        await self.drop_connections()
        self._sessions.clear()

    async def drop_connections(self, code: int = 4000) -> None:
        """Close every live gateway socket (what a network blip or a Discord-side
        restart looks like to the client)."""
        self.connected.clear()
        for session in self._sessions.values():
            ws, session.ws = session.ws, None
            if ws is not None and not ws.closed:
                await ws.close(code=code, message=b"dropped by test")

    # ------------------------------------------------------------------ REST
    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        self.auth_headers.append(header)
        return header == f"Bot {self.token}"

    def _route(self, request: web.Request) -> web.Response | None:
        """Common checks: record the call, 401 without the right token, canned errors."""
        self.requests.append((request.method, request.path))
        if not self._authorized(request):
            return json_response({"message": "401: Unauthorized", "code": 0}, status=401)
        cid = request.match_info.get("channel_id")
        if cid is not None:
            key = (request.method, request.path.split("/channels/", 1)[1])
            queue = self._failures.get(key)
            if queue:
                err = queue.pop(0)
                if isinstance(err.body, str):  # e.g. Cloudflare's HTML error page
                    return web.Response(text=err.body, status=err.status,
                                        headers=err.headers, content_type="text/html")
                return json_response(err.body, status=err.status, headers=err.headers)
        return None

    @staticmethod
    def _ratelimit_headers() -> dict[str, str]:
        # Generous static bucket: the client never has to pre-emptively sleep in tests.
        return {
            "X-RateLimit-Limit": "5",
            "X-RateLimit-Remaining": "4",
            "X-RateLimit-Reset-After": "1.000",
            "X-RateLimit-Reset": f"{datetime.now(UTC).timestamp() + 1:.3f}",
            "X-RateLimit-Bucket": "fake-messages-bucket",
            "Via": "1.1 google",
        }

    async def _users_me(self, request: web.Request) -> web.Response:
        return self._route(request) or json_response(
            {**self.bot, "verified": True, "mfa_enabled": False, "flags": 0}
        )

    async def _application(self, request: web.Request) -> web.Response:
        return self._route(request) or json_response(
            {
                "id": self.application_id,
                "name": "clawbot",
                "icon": None,
                "description": "",
                "rpc_origins": [],
                "bot_public": False,
                "bot_require_code_grant": False,
                "owner": self.owner,
                "summary": "",
                "verify_key": "0" * 64,
                "team": None,
                "flags": (1 << 19) if self.message_content_enabled else 0,
                "bot": self.bot,
            }
        )

    async def _gateway(self, request: web.Request) -> web.Response:
        return self._route(request) or json_response({"url": self.gateway_url})

    async def _gateway_bot(self, request: web.Request) -> web.Response:
        return self._route(request) or json_response(
            {
                "url": self.gateway_url,
                "shards": 1,
                "session_start_limit": {
                    "total": 1000,
                    "remaining": 999,
                    "reset_after": 14400000,
                    "max_concurrency": 1,
                },
            }
        )

    async def _get_channel(self, request: web.Request) -> web.Response:
        denied = self._route(request)
        if denied is not None:
            return denied
        channel = self.channels.get(request.match_info["channel_id"])
        if channel is None:
            return json_response({"message": "Unknown Channel", "code": 10003}, status=404)
        return json_response(channel, headers=self._ratelimit_headers())

    async def _post_message(self, request: web.Request) -> web.Response:
        denied = self._route(request)
        if denied is not None:
            return denied
        cid = request.match_info["channel_id"]
        channel = self.channels.get(cid)
        if channel is None:
            return json_response({"message": "Unknown Channel", "code": 10003}, status=404)
        files: list[tuple[str, bytes]] = []
        if request.content_type == "multipart/form-data":  # attachments: payload_json +
            body, files = await _multipart(request)         # files[n] parts, as documented
        else:
            body = await request.json()
        content = body.get("content") or ""
        if len(content) > 2000:
            return json_response(
                {
                    "message": "Invalid Form Body",
                    "code": 50035,
                    "errors": {
                        "content": {
                            "_errors": [
                                {
                                    "code": "BASE_TYPE_MAX_LENGTH",
                                    "message": "Must be 2000 or fewer in length.",
                                }
                            ]
                        }
                    },
                },
                status=400,
            )
        ref_in = body.get("message_reference")
        ref_out: dict[str, Any] | None = None
        if ref_in:
            # Snowflakes may arrive as ints or strings; Discord always echoes strings.
            target = self.messages.get(str(ref_in.get("message_id")))
            if target is not None:
                ref_out = {"type": 0, "message_id": target["id"],
                           "channel_id": target["channel_id"]}
                if "guild_id" in target:
                    ref_out["guild_id"] = target["guild_id"]
            elif ref_in.get("fail_if_not_exists", True):
                return json_response(
                    {"message": "Invalid Form Body", "code": 50035,
                     "errors": {"message_reference": {"_errors": [{
                         "code": "REPLIES_UNKNOWN_MESSAGE", "message": "Unknown message"}]}}},
                    status=400,
                )
        nonce = body.get("nonce")
        nonce_key = (self.bot["id"], str(nonce))
        if nonce is not None and body.get("enforce_nonce") and nonce_key in self._nonces:
            first = self._nonces[nonce_key]
            return json_response({k: v for k, v in first.items() if k != "request"},
                                 headers=self._ratelimit_headers())
        msg = self.message_json(channel, self.bot, content)
        msg["request"] = body  # keep what the client asked for (allowed_mentions, ...)
        if nonce is not None:
            msg["nonce"] = nonce  # Discord echoes it in the message
            self._nonces[nonce_key] = msg
        if ref_out is not None:
            msg["type"] = 19
            msg["message_reference"] = ref_out
        if files:
            msg["attachments"] = [self._attachment(cid, name, data) for name, data in files]
            self.files_sent += [{"channel_id": cid, "message_id": msg["id"], "name": name,
                                 "data": data, "content": content} for name, data in files]
        self.sent.append(msg)
        if self.drop_after_accept > 0:
            self.drop_after_accept -= 1
            return drop_connection(request)
        reply = {k: v for k, v in msg.items() if k != "request"}
        return json_response(reply, headers=self._ratelimit_headers())

    def _attachment(self, channel_id: str, name: str, data: bytes) -> dict[str, Any]:
        aid = str(next(self._attachment_ids))
        url = f"https://cdn.discordapp.com/attachments/{channel_id}/{aid}/{name}"
        return {"id": aid, "filename": name, "size": len(data), "url": url, "proxy_url": url,
                "content_type": "application/octet-stream"}

    async def _get_messages(self, request: web.Request) -> web.Response:
        """Channel history (``after``/``before``/``limit``), newest first, as Discord
        returns it; REST messages carry no ``guild_id``/``member``."""
        denied = self._route(request)
        if denied is not None:
            return denied
        cid = request.match_info["channel_id"]
        if cid not in self.channels:
            return json_response({"message": "Unknown Channel", "code": 10003}, status=404)
        limit = max(1, min(100, int(request.query.get("limit", "50"))))
        found = sorted(
            (m for m in self.messages.values() if m["channel_id"] == cid),
            key=lambda m: int(m["id"]),
        )
        if "after" in request.query:
            after = int(request.query["after"])
            found = [m for m in found if int(m["id"]) > after][:limit]
        else:
            if "before" in request.query:
                before = int(request.query["before"])
                found = [m for m in found if int(m["id"]) < before]
            found = found[-limit:]
        body = [
            {k: v for k, v in m.items() if k not in ("guild_id", "member", "request")}
            for m in reversed(found)
        ]
        return json_response(body, headers=self._ratelimit_headers())

    async def _post_typing(self, request: web.Request) -> web.Response:
        denied = self._route(request)
        if denied is not None:
            return denied
        cid = request.match_info["channel_id"]
        if cid not in self.channels:
            return json_response({"message": "Unknown Channel", "code": 10003}, status=404)
        self.typing.append(cid)
        return web.Response(status=204, headers=self._ratelimit_headers())

    # ------------------------------------------------------------------ gateway
    async def _send(self, session: Session, payload: dict[str, Any]) -> None:
        ws = session.ws
        if ws is None or ws.closed:
            return
        data = json.dumps(payload).encode()
        if session.compressor is not None:
            await ws.send_bytes(session.compressor(data))
        else:
            await ws.send_str(data.decode())

    async def _ws(self, request: web.Request) -> web.StreamResponse:
        if self.refuse_gateway > 0:
            self.refuse_gateway -= 1
            return web.Response(status=503, text="upstream connect error")
        if request.query.get("v") != "10" or request.query.get("encoding", "json") != "json":
            return web.Response(status=400, text="unsupported gateway version or encoding")
        compress = request.query.get("compress")
        if compress is not None and compress not in _COMPRESSORS:
            return web.Response(status=400, text=f"unsupported compression {compress}")
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        conn = Session(session_id="")  # placeholder until IDENTIFY or RESUME binds one
        conn.ws = ws
        conn.compressor = _COMPRESSORS[compress]() if compress is not None else None
        await self._send(
            conn,
            {
                "op": 10,
                "d": {"heartbeat_interval": self.heartbeat_interval_ms},
                "s": None,
                "t": None,
            },
        )
        session: Session | None = None
        async for msg in ws:
            if msg.type is not WSMsgType.TEXT:
                continue
            payload = json.loads(msg.data)
            op, d = payload.get("op"), payload.get("d")
            if op == 1:  # HEARTBEAT
                self.heartbeats += 1
                if self.ack_heartbeats:
                    await self._send(session or conn, {"op": 11, "d": None, "s": None, "t": None})
            elif op == 2:  # IDENTIFY
                session = await self._identify(ws, conn, d)
                if session is None:
                    break
            elif op == 6:  # RESUME
                session = await self._resume(ws, conn, d)
                if session is None:
                    break
        if session is not None and session.ws is ws:
            session.ws = None
        return ws

    async def _identify(
        self, ws: web.WebSocketResponse, conn: Session, d: dict[str, Any]
    ) -> Session | None:
        self.identifies.append(d)
        if d.get("token") != self.token or self.gateway_rejects_token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return None
        intents = int(d.get("intents", 0))
        wants_content = bool(intents & INTENT_MESSAGE_CONTENT)
        if wants_content and not self.message_content_enabled:
            await ws.close(code=4014, message=b"Disallowed intent(s).")
            return None
        session = Session(session_id=snowflake(), ws=ws, compressor=conn.compressor)
        self._sessions[session.session_id] = session
        ready = {
            "v": 10,
            "user": {**self.bot, "verified": True, "mfa_enabled": False, "flags": 0},
            "guilds": [{"id": gid, "unavailable": True} for gid in self.guilds],
            "session_id": session.session_id,
            "resume_gateway_url": self.gateway_url,
            "application": {"id": self.application_id, "flags": 1 << 19},
            "private_channels": [],
            "relationships": [],
            "user_settings": {},
            "presences": [],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": [],
        }
        session.seq += 1
        await self._send(session, {"op": 0, "t": "READY", "s": session.seq, "d": ready})
        if intents & INTENT_GUILDS:
            for guild in self.guilds.values():
                session.seq += 1
                await self._send(
                    session, {"op": 0, "t": "GUILD_CREATE", "s": session.seq, "d": guild}
                )
        self.connected.set()
        return session

    async def _resume(
        self, ws: web.WebSocketResponse, conn: Session, d: dict[str, Any]
    ) -> Session | None:
        self.resumes.append(d)
        session = self._sessions.get(str(d.get("session_id")))
        if d.get("token") != self.token:
            await ws.close(code=4004, message=b"Authentication failed.")
            return None
        if session is None:
            # INVALID_SESSION, not resumable: the client must IDENTIFY afresh
            await self._send(conn, {"op": 9, "d": False, "s": None, "t": None})
            return None
        session.ws = ws
        session.compressor = conn.compressor
        seen = int(d.get("seq") or 0)
        for payload in session.log:
            if payload["s"] > seen:
                await self._send(session, payload)
        session.seq += 1
        await self._send(session, {"op": 0, "t": "RESUMED", "s": session.seq, "d": {}})
        self.connected.set()
        return session


async def _multipart(request: web.Request) -> tuple[dict[str, Any], list[tuple[str, bytes]]]:
    """A Create Message multipart body: the JSON in ``payload_json``, files in
    ``files[n]`` parts (their filename from the part's Content-Disposition)."""
    body: dict[str, Any] = {}
    files: list[tuple[str, bytes]] = []
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        assert isinstance(part, BodyPartReader)
        if part.name == "payload_json":
            body = json.loads(await part.text())
        elif (part.name or "").startswith("files["):
            files.append((part.filename or "file", bytes(await part.read())))
    return body, files
