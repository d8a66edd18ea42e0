"""A local fake of the Telegram Bot API, on 127.0.0.1, for the real python-telegram-bot.

Wire format as documented at https://core.telegram.org/bots/api#making-requests:

* ``/bot<token>/<method>`` over GET (query) or POST (urlencoded form, JSON, multipart);
  in forms, object parameters are JSON-serialized strings (what PTB sends);
* answers ``{"ok": true, "result": ...}`` or ``{"ok": false, "error_code": N,
  "description": "...", "parameters": {"retry_after": s}}`` with HTTP status ``N``;
* a wrong token gets 401 ``Unauthorized``, an unknown method 404 ``Not Found``.

Methods: getMe, getUpdates (long polling, offset confirmation, 409 while a webhook is
set or when a newer getUpdates takes over), setWebhook, deleteWebhook, getWebhookInfo,
sendMessage (validates Telegram's HTML subset, the 4096 UTF-16 limit after entity
parsing, reply targets, forum topics, blocked chats), sendChatAction, setMyCommands.

The fake can also play Telegram's webhook side: ``deliver_webhook`` POSTs an update to
the registered URL with the ``X-Telegram-Bot-Api-Secret-Token`` header and remembers
non-2xx answers for ``redeliver_failed`` (Telegram retries those).

``drop_after_accept(method)`` makes the next call of ``method`` take effect (a message
is sent) and then closes the connection without an answer, the ambiguous failure the
client cannot tell from one that never arrived; ``answer_late(method, seconds)`` makes
it take effect and answer that much later (after the client's read timeout).
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.idle import IdleTimeout

#: Shaped like a real token (<bot id>:<35 chars>) and distinctive, so leak checks bite.
BOT_TOKEN = "7000000001:AAFq-t3st-T0KEN-zQ9xY8wV7uT6sR5pOnMl"
BOT_USER: dict[str, Any] = {
    "id": 7000000001,
    "is_bot": True,
    "first_name": "Claw",
    "username": "claw_bot",
    "can_join_groups": True,
    "can_read_all_group_messages": False,
    "supports_inline_queries": False,
    "can_connect_to_business": False,
    "has_main_web_app": False,
}

_OBJECT_PARAMS = {
    "reply_parameters",
    "reply_markup",
    "entities",
    "allowed_updates",
    "link_preview_options",
    "commands",
    "scope",
}
_INT_PARAMS = {"offset", "limit", "timeout", "message_thread_id", "max_connections"}
_BOOL_PARAMS = {"drop_pending_updates", "disable_notification", "protect_content"}
_SECRET_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
_CHAT_ACTIONS = {
    "typing",
    "upload_photo",
    "record_video",
    "upload_video",
    "record_voice",
    "upload_voice",
    "upload_document",
    "choose_sticker",
    "find_location",
    "record_video_note",
    "upload_video_note",
}

# Telegram's HTML subset: https://core.telegram.org/bots/api#html-style
_ALLOWED_TAGS = {
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "span",
    "tg-spoiler",
    "a",
    "tg-emoji",
    "code",
    "pre",
    "blockquote",
}
_TAG = re.compile(r'<(/?)([a-zA-Z][a-zA-Z0-9-]*)((?:\s+[a-zA-Z-]+(?:="[^"]*")?)*)\s*>')
_ENTITY = re.compile(r"&(lt|gt|amp|quot|#[0-9]+|#x[0-9a-fA-F]+);")
_ENTITY_VALUES = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}


@dataclass
class ApiFailure:
    """A canned error answer for the next call of one method."""

    error_code: int
    description: str
    parameters: dict[str, Any] | None = None


def failure_for(status: int, retry_after: float | None = None) -> ApiFailure:
    """Telegram's own answer for an HTTP status, as the Bot API sends it."""
    if status == 429:
        seconds = int(retry_after or 5)
        return ApiFailure(
            429, f"Too Many Requests: retry after {seconds}", {"retry_after": seconds}
        )
    if status == 403:
        return ApiFailure(403, "Forbidden: bot was blocked by the user")
    if status == 400:
        return ApiFailure(400, "Bad Request: chat not found")
    if status == 401:
        return ApiFailure(401, "Unauthorized")
    return ApiFailure(status, "Internal Server Error")


def utf16_len(text: str) -> int:
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def parse_html(text: str) -> tuple[str | None, str]:
    """Validate Telegram HTML; return (error description or None, visible text)."""
    visible: list[str] = []
    stack: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "<":
            m = _TAG.match(text, i)
            offset = len(text[:i].encode())
            if m is None:
                return f"Unexpected end of name token at byte offset {offset}", ""
            closing, name = m.group(1) == "/", m.group(2).lower()
            if name not in _ALLOWED_TAGS:
                return f'Unsupported start tag "{name}" at byte offset {offset}', ""
            if closing:
                if not stack or stack[-1] != name:
                    want = stack[-1] if stack else ""
                    return (
                        f'Unmatched end tag at byte offset {offset}, expected "</{want}>", '
                        f'found "</{name}>"',
                        "",
                    )
                stack.pop()
            else:
                if name == "a" and "href=" not in m.group(3):
                    return f"Can't parse a tag at byte offset {offset}", ""
                stack.append(name)
            i = m.end()
        elif ch == "&":
            m = _ENTITY.match(text, i)
            if m is None:
                return f"Unsupported HTML entity at byte offset {len(text[:i].encode())}", ""
            ref = m.group(1)
            if ref.startswith("#x"):
                visible.append(chr(int(ref[2:], 16)))
            elif ref.startswith("#"):
                visible.append(chr(int(ref[1:])))
            else:
                visible.append(_ENTITY_VALUES[ref])
            i = m.end()
        elif ch == ">":
            return f"Unexpected end tag at byte offset {len(text[:i].encode())}", ""
        else:
            visible.append(ch)
            i += 1
    if stack:
        return f'Can\'t find end tag corresponding to start tag "{stack[-1]}"', ""
    return None, "".join(visible)


class _ApiError(Exception):
    def __init__(self, failure: ApiFailure) -> None:
        super().__init__(failure.description)
        self.failure = failure


def _bad(description: str) -> _ApiError:
    return _ApiError(ApiFailure(400, f"Bad Request: {description}"))


@dataclass
class FakeTelegram:
    """One bot's view of Telegram. Start with ``await start()``; ``base_url`` is what the
    adapter's ``base_url`` setting takes (PTB appends the token)."""

    token: str = BOT_TOKEN
    bot: dict[str, Any] = field(default_factory=lambda: dict(BOT_USER))
    #: chats the fake knows: id -> Chat JSON (others: negative ids are supergroups)
    chats: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: forum chats and their topic ids (message_thread_id)
    forums: dict[int, set[int]] = field(default_factory=dict)
    blocked_chats: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.pending: list[dict[str, Any]] = []
        self.next_update_id = 100_000
        self.allowed_updates: list[str] = []
        self.webhook: dict[str, Any] | None = None
        self.webhook_statuses: dict[int, int] = {}
        self._webhook_updates: dict[int, dict[str, Any]] = {}
        self.sent: list[dict[str, Any]] = []
        #: sendDocument uploads: chat_id, name, data, caption, message_thread_id
        self.documents: list[dict[str, Any]] = []
        self.actions: list[dict[str, Any]] = []
        #: what setMyCommands stored: [{"command", "description"}]
        self.commands: list[dict[str, str]] = []
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.failures: dict[str, deque[ApiFailure]] = defaultdict(deque)
        self._drops: dict[str, int] = defaultdict(int)
        self._late: dict[str, float] = {}
        self.stall_polls = 0  # hold this many getUpdates forever (a dead connection)
        self.stalled = 0
        self.messages: set[tuple[int, int]] = set()
        self._next_message_id: dict[int, int] = defaultdict(lambda: 10_000)
        self._poll_generation = 0
        self._changed = asyncio.Condition()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.port = 0
        #: ``idle.seconds``: keep-alive connections idle longer are reset (tests/fakes/idle)
        self.idle = IdleTimeout()
        #: files the fake serves: file_id -> bytes (getFile, then /file/bot<token>/<path>)
        self.files: dict[str, bytes] = {}
        #: file paths downloaded, in order (a test asserts what was, or was not, fetched)
        self.downloads: list[str] = []
        #: while set, a download request waits for it to clear (a test kills the client
        #: mid-download); ``download_started`` is set when one arrives
        self.hold_downloads = False
        self.download_started = asyncio.Event()

    # ------------------------------------------------------------------ server
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/bot"

    @property
    def base_file_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/file/bot"

    async def start(self) -> None:
        app = web.Application(middlewares=[self.idle.middleware])
        app.router.add_route("*", "/bot{token}/{method}", self._api)
        app.router.add_get("/file/bot{token}/{path:.+}", self._file)
        # no access log: it would print the token-bearing paths (the real API is remote)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        # release held long polls and stalled requests so shutdown does not wait on them
        self._closing.set()
        async with self._changed:
            self._changed.notify_all()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------------ scripting
    def fail_next(self, method: str, failure: ApiFailure) -> None:
        self.failures[method].append(failure)

    def drop_after_accept(self, method: str, times: int = 1) -> None:
        self._drops[method] += times

    def answer_late(self, method: str, seconds: float) -> None:
        self._late[method] = seconds

    def known_message(self, chat_id: int, message_id: int) -> None:
        self.messages.add((chat_id, message_id))

    def _register(self, update: dict[str, Any]) -> None:
        for key in ("message", "edited_message", "channel_post", "edited_channel_post"):
            message = update.get(key)
            if isinstance(message, dict) and "chat" in message:
                chat_id = message["chat"]["id"]
                self.chats.setdefault(chat_id, message["chat"])
                self.messages.add((chat_id, message["message_id"]))
                reply = message.get("reply_to_message")
                if isinstance(reply, dict):
                    self.messages.add((chat_id, reply["message_id"]))

    async def enqueue(self, update: dict[str, Any]) -> int:
        """Queue an update for getUpdates, numbered as Telegram would (increasing)."""
        update = copy.deepcopy(update)
        self.next_update_id += 1
        update["update_id"] = self.next_update_id
        self._register(update)
        async with self._changed:
            self.pending.append(update)
            self._changed.notify_all()
        return self.next_update_id

    async def deliver_webhook(self, update: dict[str, Any]) -> tuple[int, int]:
        """POST an update to the registered webhook; returns (update_id, HTTP status)."""
        update = copy.deepcopy(update)
        self.next_update_id += 1
        update["update_id"] = self.next_update_id
        self._register(update)
        status = await self._post_webhook(update)
        return update["update_id"], status

    async def redeliver_failed(self) -> None:
        """Retry every webhook delivery that did not get a 2xx (Telegram does)."""
        for update_id, status in list(self.webhook_statuses.items()):
            if not 200 <= status < 300:
                await self._post_webhook(self._webhook_updates[update_id])

    async def _post_webhook(self, update: dict[str, Any]) -> int:
        assert self.webhook is not None, "no webhook registered"
        headers = {"Content-Type": "application/json"}
        if self.webhook.get("secret_token"):
            headers["X-Telegram-Bot-Api-Secret-Token"] = self.webhook["secret_token"]
        async with (
            aiohttp.ClientSession() as session,
            session.post(self.webhook["url"], data=json.dumps(update), headers=headers) as resp,
        ):
            status = resp.status
        self.webhook_statuses[update["update_id"]] = status
        self._webhook_updates[update["update_id"]] = update
        return status

    # ------------------------------------------------------------------ HTTP
    async def _params(self, request: web.Request) -> dict[str, Any]:
        raw: dict[str, Any] = dict(request.query)
        if request.method == "POST" and request.can_read_body:
            if request.content_type == "application/json":
                body = await request.json()
                if isinstance(body, dict):
                    raw.update(body)
            else:
                form = await request.post()
                raw.update({k: v for k, v in form.items()
                            if isinstance(v, str | web.FileField)})
        params: dict[str, Any] = {}
        for key, value in raw.items():
            if isinstance(value, str) and key in _OBJECT_PARAMS:
                try:
                    value = json.loads(value)
                except ValueError as error:
                    raise _bad(f"can't parse {key} JSON object") from error
            elif isinstance(value, str) and key in _INT_PARAMS:
                try:
                    value = int(value)
                except ValueError as error:
                    raise _bad(f"invalid {key} specified") from error
            elif isinstance(value, str) and key in _BOOL_PARAMS:
                value = value.lower() in ("true", "1")
            params[key] = value
        return params

    async def _api(self, request: web.Request) -> web.Response:
        if request.match_info["token"] != self.token:
            return self._error(ApiFailure(401, "Unauthorized"))
        method = request.match_info["method"]
        handler = getattr(self, f"_m_{method.lower()}", None)
        if handler is None:
            return self._error(ApiFailure(404, "Not Found"))
        try:
            params = await self._params(request)
            self.calls.append((method, params))
            if self.failures[method]:
                raise _ApiError(self.failures[method].popleft())
            result = await handler(params)
        except _ApiError as error:
            return self._error(error.failure)
        if self._drops[method] > 0:
            self._drops[method] -= 1
            assert request.transport is not None
            request.transport.close()  # done, but the client never hears of it
        late = self._late.pop(method, 0.0)
        if late:
            await asyncio.sleep(late)
        return web.json_response({"ok": True, "result": result})

    @staticmethod
    def _error(failure: ApiFailure) -> web.Response:
        body: dict[str, Any] = {
            "ok": False,
            "error_code": failure.error_code,
            "description": failure.description,
        }
        if failure.parameters:
            body["parameters"] = failure.parameters
        return web.json_response(body, status=failure.error_code)

    # ------------------------------------------------------------------ methods
    async def _m_getme(self, params: dict[str, Any]) -> dict[str, Any]:
        return self.bot

    async def _m_setmycommands(self, params: dict[str, Any]) -> bool:
        """Bot API rules: at most 100 commands; ``command`` 1-32 chars of a-z, 0-9 and
        "_"; ``description`` 1-256 chars."""
        commands = params.get("commands")
        if not isinstance(commands, list) or len(commands) > 100:
            raise _bad("Bad Request: commands must be a list of at most 100")
        for c in commands:
            name, text = c.get("command", ""), c.get("description", "")
            if not re.fullmatch(r"[a-z0-9_]{1,32}", name):
                raise _bad("Bad Request: BOT_COMMAND_INVALID")
            if not 1 <= len(text) <= 256:
                raise _bad("Bad Request: BOT_COMMAND_DESCRIPTION_INVALID")
        self.commands = [{"command": c["command"], "description": c["description"]}
                         for c in commands]
        return True

    async def _m_setwebhook(self, params: dict[str, Any]) -> bool:
        url = params.get("url", "")
        secret = params.get("secret_token")
        if secret is not None and not _SECRET_TOKEN.match(secret):
            raise _bad("secret token contains unallowed characters")
        if url and not url.startswith(("https://", "http://127.0.0.1")):
            raise _bad("bad webhook: An HTTPS URL must be provided for webhook")
        self.webhook = (
            {
                "url": url,
                "secret_token": secret,
                "allowed_updates": params.get("allowed_updates"),
                "max_connections": params.get("max_connections", 40),
            }
            if url
            else None
        )
        return True

    async def _m_deletewebhook(self, params: dict[str, Any]) -> bool:
        self.webhook = None
        if params.get("drop_pending_updates"):
            self.pending.clear()
        return True

    async def _m_getwebhookinfo(self, params: dict[str, Any]) -> dict[str, Any]:
        info: dict[str, Any] = {
            "url": self.webhook["url"] if self.webhook else "",
            "has_custom_certificate": False,
            "pending_update_count": len(self.pending),
        }
        return info

    def _allowed(self, update: dict[str, Any]) -> bool:
        if not self.allowed_updates:
            return True
        kinds = set(update) - {"update_id"}
        return bool(kinds & set(self.allowed_updates))

    async def _m_getupdates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        if self.webhook is not None:
            raise _ApiError(
                ApiFailure(
                    409,
                    "Conflict: can't use getUpdates method while webhook is active; "
                    "use deleteWebhook to delete the webhook first",
                )
            )
        offset = params.get("offset")
        limit = max(1, min(100, params.get("limit", 100)))
        timeout = max(0, min(50, params.get("timeout", 0)))
        if "allowed_updates" in params and params["allowed_updates"] is not None:
            self.allowed_updates = list(params["allowed_updates"])
        async with self._changed:
            # "An update is considered confirmed as soon as getUpdates is called with an
            # offset higher than its update_id."
            if isinstance(offset, int) and offset > 0:
                self.pending = [u for u in self.pending if u["update_id"] >= offset]
            self.pending = [u for u in self.pending if self._allowed(u)]
            self._poll_generation += 1
            generation = self._poll_generation
            self._changed.notify_all()
        if self.stall_polls > 0:
            self.stall_polls -= 1
            self.stalled += 1
            await self._closing.wait()  # a connection that never answers
            return []
        deadline = time.monotonic() + timeout
        async with self._changed:
            while not self.pending and not self._closing.is_set():
                if self._poll_generation != generation:
                    raise _ApiError(
                        ApiFailure(409, "Conflict: terminated by other getUpdates request")
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(self._changed.wait(), remaining)
                except TimeoutError:
                    break
            return copy.deepcopy(self.pending[:limit])

    def _chat_json(self, chat_id: int) -> dict[str, Any]:
        if chat_id in self.chats:
            return self.chats[chat_id]
        if chat_id > 0:
            return {"id": chat_id, "type": "private", "first_name": "User"}
        return {"id": chat_id, "type": "supergroup", "title": "Group"}

    def _chat_id(self, params: dict[str, Any]) -> int:
        value = params.get("chat_id")
        if value is None or value == "":
            raise _bad("chat_id is empty")
        try:
            return int(value)
        except (TypeError, ValueError) as error:
            raise _bad("chat not found") from error

    async def _m_sendmessage(self, params: dict[str, Any]) -> dict[str, Any]:
        chat_id = self._chat_id(params)
        if chat_id in self.blocked_chats:
            raise _ApiError(ApiFailure(403, "Forbidden: bot was blocked by the user"))
        text = params.get("text", "")
        if not isinstance(text, str) or not text.strip():
            raise _bad("message text is empty")
        visible = text
        if str(params.get("parse_mode", "")).upper() == "HTML":
            problem, visible = parse_html(text)
            if problem is not None:
                raise _bad(f"can't parse entities: {problem}")
        if utf16_len(visible) > 4096:
            raise _bad("message is too long")
        thread = params.get("message_thread_id")
        if thread is not None and chat_id in self.forums and thread not in self.forums[chat_id]:
            raise _bad("message thread not found")
        reply = params.get("reply_parameters")
        reply_to: int | None = None
        if isinstance(reply, dict):
            reply_to = int(reply["message_id"])
            if (chat_id, reply_to) not in self.messages and not reply.get(
                "allow_sending_without_reply"
            ):
                raise _bad("message to be replied not found")
        self._next_message_id[chat_id] += 1
        message_id = self._next_message_id[chat_id]
        self.messages.add((chat_id, message_id))
        record = dict(params, chat_id=chat_id, message_id=message_id)
        self.sent.append(record)
        result: dict[str, Any] = {
            "message_id": message_id,
            "from": self.bot,
            "chat": self._chat_json(chat_id),
            "date": int(time.time()),
            "text": visible,
        }
        if thread is not None:
            result["message_thread_id"] = thread
            result["is_topic_message"] = chat_id in self.forums
        if reply_to is not None and (chat_id, reply_to) in self.messages:
            result["reply_to_message"] = {
                "message_id": reply_to,
                "chat": self._chat_json(chat_id),
                "date": int(time.time()),
            }
        return result

    async def _m_senddocument(self, params: dict[str, Any]) -> dict[str, Any]:
        """sendDocument: ``document`` uploaded as a multipart file (what PTB sends for
        bytes); an optional ``caption`` of at most 1024 characters."""
        chat_id = self._chat_id(params)
        if chat_id in self.blocked_chats:
            raise _ApiError(ApiFailure(403, "Forbidden: bot was blocked by the user"))
        upload = params.get("document")
        if not isinstance(upload, web.FileField):
            raise _bad("there is no document in the request")
        caption = params.get("caption") or ""
        if len(caption) > 1024:
            raise _bad("message caption is too long")
        data = upload.file.read()
        self._next_message_id[chat_id] += 1
        message_id = self._next_message_id[chat_id]
        self.messages.add((chat_id, message_id))
        thread = params.get("message_thread_id")
        self.documents.append({"chat_id": chat_id, "name": upload.filename, "data": data,
                               "caption": caption, "message_thread_id": thread,
                               "message_id": message_id})
        return {"message_id": message_id, "from": self.bot, "chat": self._chat_json(chat_id),
                "date": int(time.time()), "caption": caption,
                "document": {"file_id": f"doc-{message_id}", "file_unique_id": f"u{message_id}",
                             "file_name": upload.filename, "file_size": len(data)}}

    async def _m_getfile(self, params: dict[str, Any]) -> dict[str, Any]:
        """Bot API getFile: the file's size and a path valid for an hour; files over
        20 MB are "too big" for bots."""
        file_id = str(params.get("file_id", ""))
        data = self.files.get(file_id)
        if data is None:
            raise _bad("Bad Request: invalid file_id")
        if len(data) > 20 * 1024 * 1024:
            raise _bad("Bad Request: file is too big")
        return {"file_id": file_id, "file_unique_id": f"u{file_id}",
                "file_size": len(data), "file_path": f"documents/{file_id}"}

    async def _file(self, request: web.Request) -> web.StreamResponse:
        if request.match_info["token"] != self.token:
            return web.Response(status=401)
        path = request.match_info["path"]
        self.downloads.append(path)
        self.download_started.set()
        while self.hold_downloads and not self._closing.is_set():
            await asyncio.sleep(0.05)
        data = self.files.get(path.rpartition("/")[2])
        if data is None:
            return web.Response(status=404)
        return web.Response(body=data, content_type="application/octet-stream")

    async def _m_sendchataction(self, params: dict[str, Any]) -> bool:
        chat_id = self._chat_id(params)
        if chat_id in self.blocked_chats:
            raise _ApiError(ApiFailure(403, "Forbidden: bot was blocked by the user"))
        if params.get("action") not in _CHAT_ACTIONS:
            raise _bad("wrong type of action specified")
        self.actions.append(dict(params, chat_id=chat_id))
        return True
