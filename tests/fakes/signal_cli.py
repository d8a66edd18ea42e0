"""A local fake of ``signal-cli daemon --http``, on 127.0.0.1.

It speaks what signal-cli's ``HttpServerHandler`` serves (checked against signal-cli's
source and ``man/signal-cli-jsonrpc.5``):

* ``POST /api/v1/rpc``: one JSON-RPC 2.0 request (or a batch) with
  ``Content-Type: application/json`` (else 415); answer HTTP 200 with a result or an
  error object (-32700 parse, -32600 no method, -32601 unknown method, -32602 unknown
  account, -1 user error, -4 untrusted key, -5 rate limit, -32603 internal), HTTP 201
  with no body for a notification. Methods: ``send`` (recipient/groupId, message,
  textStyle, quoteTimestamp/quoteAuthor, ``attachments``: RFC 2397 data URIs, parsed
  as ``DataURI`` does, a path being a file the fake has none of; result
  ``{"timestamp", "results"}``),
  ``sendTyping``, ``version``, ``getAttachment`` (``id``; result ``{"data": <base64>}``
  of a file the daemon downloaded on receipt, ``attachments``; an unknown id is the
  user error "Could not find attachment with ID: <id>", as ``GetAttachmentCommand``).
* ``GET /api/v1/events``: ``text/event-stream``; each received message as
  ``event:receive`` + ``data:<json>`` with NO ``id:`` line, and a ``:`` keep-alive
  comment every ``keepalive`` seconds (signal-cli: 15).
* ``GET /api/v1/check``: 200.
* The Host header must name 127.0.0.1/localhost and the bound port (else 421).

``receive(event)`` plays "a message for this account reached the Signal server". What
happens next follows ``receive_mode``: ``on-connection`` keeps it on the server until
an events client listens; ``on-start`` (signal-cli's default) has the daemon receive
it at once (or as soon as the daemon is up) and write it to whoever listens right
now, dropping it (``dropped``) when nobody does, as signal-cli does. ``stop()`` /
``restart()`` end every events connection, like a daemon restart.

With ``auth`` set the fake also plays an authenticating reverse proxy in front of the
daemon (401 without ``Authorization: <auth>``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_plus

from aiohttp import web

from tests.fakes.idle import IdleTimeout

BOT_NUMBER = "+15550001000"
BOT_UUID = "b0b0b0b0-0000-4000-8000-000000000001"
PROXY_AUTH = "Bearer proxy-s3cret-signal-0123456789"
VERSION = "0.13.18"

USER_ERROR, UNTRUSTED_KEY_ERROR, RATELIMIT_ERROR = -1, -4, -5
#: answers longer than this are streamed in chunks (``FakeSignalCli.written``)
STREAM_OVER = 256 * 1024
_STYLE = re.compile(r"(\d+):(\d+):(.+)")
_STYLES = {"BOLD", "ITALIC", "SPOILER", "STRIKETHROUGH", "MONOSPACE"}
#: signal-cli's ``DataURI.DATA_URI_PATTERN`` and ``PARAMETER_PATTERN``
_DATA_URI = re.compile(r"data:(?P<type>.+?/.+?)?(?P<parameters>;.+?)?(?P<base64>;base64)?,"
                       r"(?P<data>.+)", re.IGNORECASE | re.DOTALL)
_PARAMETER = re.compile(r";(?P<key>[^;=]+)=(?P<value>[^;]+)")


@dataclass(frozen=True)
class SentAttachment:
    """One attachment of a ``send``, as signal-cli reads its data URI."""

    mime: str
    filename: str | None
    data: bytes


def read_attachment(value: str) -> SentAttachment:
    """A data URI as signal-cli's ``DataURI.of`` parses it (parameters URL-decoded);
    anything else is a path, which this fake has no file for (signal-cli's error)."""
    found = _DATA_URI.fullmatch(value)
    if found is None:
        raise _RpcFailure(user_error(f"Failed to send message: {value} (No such file or "
                                     "directory) (FileNotFoundException)"))
    params = {m["key"].lower(): unquote_plus(m["value"])
              for m in _PARAMETER.finditer(found["parameters"] or "")}
    raw = found["data"]
    data = base64.b64decode(raw, validate=True) if found["base64"] else \
        unquote_plus(raw).encode("ascii")
    return SentAttachment(found["type"] or "text/plain", params.get("filename"), data)


def _address(recipient: str) -> dict[str, Any]:
    if recipient.startswith("+"):
        return {"uuid": None, "number": recipient, "username": None}
    return {"uuid": recipient, "number": None, "username": None}


def _send_error(code: int, message: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"code": code, "message": message,
            "data": {"response": {"timestamp": int(time.time() * 1000), "results": results}}}


def rate_limit_error(recipient: str, retry_after: float | None) -> dict[str, Any]:
    result: dict[str, Any] = {"recipientAddress": _address(recipient), "type": "RATE_LIMIT_FAILURE"}
    if retry_after is not None:
        result["retryAfterSeconds"] = int(retry_after)
    return _send_error(RATELIMIT_ERROR, "Failed to send message due to rate limiting", [result])


def captcha_error(recipient: str, token: str, retry_after: int = 86400) -> dict[str, Any]:
    """A "proof required" failure: signal-cli reports it as a rate limit with a token."""
    return _send_error(RATELIMIT_ERROR, "Failed to send message due to rate limiting", [
        {"recipientAddress": _address(recipient), "type": "RATE_LIMIT_FAILURE",
         "token": token, "retryAfterSeconds": retry_after}])


def untrusted_error(recipient: str) -> dict[str, Any]:
    return _send_error(UNTRUSTED_KEY_ERROR, "Failed to send message due to untrusted identities",
                       [{"recipientAddress": _address(recipient), "type": "IDENTITY_FAILURE"}])


def user_error(message: str) -> dict[str, Any]:
    return {"code": USER_ERROR, "message": message, "data": None}


def internal_error() -> dict[str, Any]:
    return {"code": -32603, "data": None,
            "message": "Failed to send message: Connection reset (IOException) "
                       "(UnexpectedErrorException)"}


def failure_for(status: int, recipient: str, retry_after: float | None = None) -> dict[str, Any]:
    """signal-cli's own answer for what an HTTP API would call ``status``."""
    if status == 429:
        return rate_limit_error(recipient, retry_after)
    if status == 403:
        return user_error("User is not a member in group")
    return internal_error()


@dataclass
class FakeSignalCli:
    """The fake daemon; ``await start()`` then point ``url`` at ``base_url``."""

    account: str = BOT_NUMBER
    receive_mode: str = "on-connection"
    keepalive: float = 15.0
    auth: str | None = field(default=None, repr=False)
    #: group id (base64) -> member numbers/uuids
    groups: dict[str, list[str]] = field(default_factory=dict)
    #: accepted sends: the request params plus the assigned "timestamp"
    sent: list[dict[str, Any]] = field(default_factory=list)
    typing: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: events received while nobody listened, in on-start mode: gone for good
    dropped: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    #: attachment id -> bytes: what the daemon downloaded with the messages it received
    attachments: dict[str, bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self.port = 0
        self._subscribers: list[asyncio.Queue[dict[str, Any] | None]] = []
        self._held: list[dict[str, Any]] = []  # on the "Signal server" (on-connection)
        self._changed = asyncio.Condition()
        self._last_ts = 0
        self.connections = 0
        #: bytes of the last streamed (long) answer the client read before it hung up
        self.written = 0
        self._drops: dict[str, int] = {}
        #: ``idle.seconds``: keep-alive connections idle longer are reset (tests/fakes/idle)
        self.idle = IdleTimeout()

    # -- life cycle -------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        if self.receive_mode == "on-start":
            # signal-cli starts receiving at once: what waited on the Signal server while
            # it was down is received now, with no client listening yet, and dropped
            self.dropped.extend(self._held)
            self._held.clear()
        app = web.Application(middlewares=[self.idle.middleware])
        app.router.add_route("*", "/api/v1/rpc", self._rpc)
        app.router.add_route("*", "/api/v1/events", self._events)
        app.router.add_get("/api/v1/check", self._check)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        for queue in list(self._subscribers):
            queue.put_nowait(None)  # ends the response: the client sees the stream close
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def restart(self) -> None:
        """A daemon restart: every events connection ends; same port afterwards."""
        await self.stop()
        await self.start()

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    async def wait_subscribers(self, count: int = 1, timeout: float = 10.0) -> None:
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self._subscribers) >= count), timeout)

    # -- receiving ---------------------------------------------------------------

    async def receive(self, event: dict[str, Any]) -> None:
        """``event`` reaches the Signal server for this account (signal-cli, when it is
        up, receives it at once)."""
        if self._runner is None:
            self._held.append(event)  # the daemon is down: it waits on the server
        elif self._subscribers:
            for queue in self._subscribers:
                queue.put_nowait(event)
        elif self.receive_mode == "on-connection":
            self._held.append(event)
        else:
            self.dropped.append(event)

    def receive_raw(self, data: str) -> None:
        """Write ``data`` as one event's data line to every listener (malformed input)."""
        for queue in self._subscribers:
            queue.put_nowait({"_raw": data})

    def fail_next(self, method: str, error: dict[str, Any]) -> None:
        self.failures.setdefault(method, []).append(error)

    def drop_after_accept(self, method: str, times: int = 1) -> None:
        """The next ``method`` call takes effect, then the connection closes unanswered."""
        self._drops[method] = self._drops.get(method, 0) + times

    # -- HTTP ---------------------------------------------------------------------

    def _refuse(self, request: web.Request) -> web.Response | None:
        host, _, port = request.headers.get("Host", "").rpartition(":")
        if host not in ("127.0.0.1", "localhost", "[::1]") or port != str(self.port):
            return web.Response(status=421)
        if self.auth is not None and request.headers.get("Authorization") != self.auth:
            return web.Response(status=401)
        return None

    async def _check(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _events(self, request: web.Request) -> web.StreamResponse:
        refused = self._refuse(request)
        if refused is not None:
            return refused
        if request.method != "GET":
            return web.Response(status=405)
        account = request.query.get("account")
        if account and account != self.account:
            return web.Response(status=400)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        for event in self._held:  # the Signal server delivers what waited for a client
            queue.put_nowait(event)
        self._held.clear()
        async with self._changed:
            self._subscribers.append(queue)
            self.connections += 1
            self._changed.notify_all()
        try:
            while True:
                try:
                    event = await asyncio.wait_for(queue.get(), self.keepalive)
                except TimeoutError:
                    await response.write(b":\n")
                    continue
                if event is None:
                    break
                data = event.get("_raw") or json.dumps(event, separators=(",", ":"))
                await response.write(f"event:receive\ndata:{data}\n\n".encode())
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._subscribers.remove(queue)
        return response

    async def _rpc(self, request: web.Request) -> web.Response:
        refused = self._refuse(request)
        if refused is not None:
            return refused
        if request.method != "POST":
            return web.Response(status=405)
        if not request.headers.get("Content-Type", "").startswith("application/json"):
            return web.Response(status=415)
        try:
            payload = json.loads(await request.read())
        except ValueError:
            return web.json_response({"jsonrpc": "2.0", "id": None, "error": {
                "code": -32700, "message": "Parse error", "data": None}})
        if isinstance(payload, list):
            answers = [a for a in (self._one(p) for p in payload) if a is not None]
            return web.json_response(answers) if answers else web.Response(status=201)
        answer = self._one(payload)
        method = payload.get("method") if isinstance(payload, dict) else None
        if isinstance(method, str) and self._drops.get(method, 0) > 0:
            self._drops[method] -= 1
            assert request.transport is not None
            request.transport.close()  # done, but the client never hears of it
        if answer is None:
            return web.Response(status=201)
        body = json.dumps(answer).encode()
        if len(body) <= STREAM_OVER:
            return web.json_response(answer)
        return await self._stream(request, body)

    async def _stream(self, request: web.Request, body: bytes) -> web.StreamResponse:
        """A long answer written in chunks, counting what the client took before it hung
        up (``written``): a client that stops reading at a cap shows it here."""
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = len(body)
        await response.prepare(request)
        self.written = 0
        try:
            for start in range(0, len(body), 64 * 1024):
                await response.write(body[start:start + 64 * 1024])
                self.written += len(body[start:start + 64 * 1024])
        except (ConnectionError, RuntimeError):
            pass  # the client closed the connection
        return response

    def _one(self, request: Any) -> dict[str, Any] | None:
        if not isinstance(request, dict) or not isinstance(request.get("method"), str):
            return {"jsonrpc": "2.0", "id": None, "error": {
                "code": -32600, "message": "method field must be set", "data": None}}
        rid, method = request.get("id"), request["method"]
        params = dict(request.get("params") or {})
        self.calls.append((method, dict(params)))
        account = params.pop("account", None)
        if account is not None and account != self.account:
            error: dict[str, Any] | None = {"code": -32602, "data": None,
                                            "message": "Specified account does not exist"}
        elif self.failures.get(method):
            error = self.failures[method].pop(0)
        else:
            error = None
        result: Any = None
        if error is None:
            try:
                result = self._method(method, params)
            except _RpcFailure as failure:
                error = failure.error
        if rid is None:
            return None
        if error is not None:
            return {"jsonrpc": "2.0", "id": rid, "error": error}
        return {"jsonrpc": "2.0", "id": rid, "result": result}

    def _method(self, method: str, params: dict[str, Any]) -> Any:
        if method == "version":
            return {"version": VERSION}
        if method == "sendTyping":
            self._recipients(params)
            self.typing.append(params)
            return {}
        if method == "send":
            return self._send(params)
        if method == "getAttachment":
            return self._get_attachment(params)
        raise _RpcFailure({"code": -32601, "message": "Method not implemented", "data": None})

    def _get_attachment(self, params: dict[str, Any]) -> dict[str, str]:
        attachment_id = params.get("id")
        if attachment_id is None:
            raise _RpcFailure(user_error("Missing attachment id parameter"))
        if attachment_id not in self.attachments:
            raise _RpcFailure(user_error(f"Could not find attachment with ID: {attachment_id}"))
        return {"data": base64.b64encode(self.attachments[attachment_id]).decode("ascii")}

    def _recipients(self, params: dict[str, Any]) -> list[tuple[str, str | None]]:
        """(recipient, group id) pairs, as signal-cli resolves them."""
        singles = params.get("recipient") or params.get("recipients") or []
        groups = params.get("groupId") or params.get("groupIds") or []
        singles = [singles] if isinstance(singles, str) else list(singles)
        groups = [groups] if isinstance(groups, str) else list(groups)
        if not singles and not groups:
            raise _RpcFailure(user_error("No recipients given"))
        out: list[tuple[str, str | None]] = [(s, None) for s in singles]
        for group in groups:
            if group not in self.groups:
                raise _RpcFailure(user_error(f"Group not found: {group}"))
            out += [(member, group) for member in self.groups[group]]
        return out

    def _send(self, params: dict[str, Any]) -> dict[str, Any]:
        targets = self._recipients(params)
        styles = params.get("textStyle") or params.get("textStyles") or []
        for style in [styles] if isinstance(styles, str) else styles:
            match = _STYLE.fullmatch(str(style))
            if match is None:
                raise _RpcFailure(user_error(
                    f"Invalid textStyle syntax ({style}) expected 'start:length:STYLE'"))
            if match.group(3) not in _STYLES:
                raise _RpcFailure(user_error(f"Invalid style: {match.group(3)}"))
        if params.get("quoteTimestamp") is not None and not params.get("quoteAuthor"):
            raise _RpcFailure(user_error("Quote author parameter is missing"))
        message = str(params.get("message") or "")
        if not message and not params.get("attachment") and not params.get("attachments"):
            raise _RpcFailure(user_error("Sending empty message is not allowed, either a "
                                         "message, attachment or sticker must be given."))
        files = params.get("attachments") or params.get("attachment") or []
        attached = [read_attachment(str(v)) for v in ([files] if isinstance(files, str)
                                                      else files)]
        self._last_ts = max(int(time.time() * 1000), self._last_ts + 1)
        record = {**params, "files": attached, "timestamp": self._last_ts,
                  "long_text": len(message.encode("utf-8")) > 2000}
        self.sent.append(record)
        results = [{"recipientAddress": _address(r), "type": "SUCCESS",
                    **({"groupId": g} if g else {})} for r, g in targets]
        return {"timestamp": self._last_ts, "results": results}


class _RpcFailure(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error.get("message"))
        self.error = error


def data_message(
    text: str,
    *,
    timestamp: int,
    number: str = "+15550002000",
    uuid: str = "a11ce000-0000-4000-8000-000000000002",
    name: str = "Alice",
    group_id: str | None = None,
    account: str = BOT_NUMBER,
    **extra: Any,
) -> dict[str, Any]:
    """A receive event shaped like signal-cli's ``JsonReceiveMessageHandler`` output."""
    data: dict[str, Any] = {"timestamp": timestamp, "message": text, "expiresInSeconds": 0,
                            "viewOnce": False, **extra}
    if group_id is not None:
        data["groupInfo"] = {"groupId": group_id, "groupName": "Crew", "revision": 3,
                             "type": "DELIVER"}
    return {"account": account, "envelope": {
        "source": number, "sourceNumber": number, "sourceUuid": uuid, "sourceName": name,
        "sourceDevice": 1, "timestamp": timestamp, "serverReceivedTimestamp": timestamp + 40,
        "serverDeliveredTimestamp": timestamp + 90, "dataMessage": data}}
