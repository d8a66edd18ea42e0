"""A local fake of the WhatsApp Business Cloud API (Graph API) on 127.0.0.1, which
also plays Meta's webhook deliveries.

Graph API side, shaped like developers.facebook.com/docs/whatsapp/cloud-api/reference:

* ``GET /v<ver>/<phone_number_id>``: the phone number object.
* ``POST /v<ver>/<phone_number_id>/media`` (multipart ``file``, ``type``,
  ``messaging_product``): ``{"id": <media id>}``, for the supported media types and
  their size caps only (``UPLOAD_CAPS``); then ``image``/``document`` messages name it.
* ``POST /v<ver>/<phone_number_id>/messages`` with ``Authorization: Bearer <token>``:
  ``{"messaging_product": "whatsapp", "contacts": [{"input", "wa_id"}],
  "messages": [{"id": "wamid.…"}]}`` (templates add ``"message_status": "accepted"``).
* Errors: ``{"error": {"message": "(#<code>) …", "type": "OAuthException", "code",
  "error_data": {"messaging_product": "whatsapp", "details"}, "fbtrace_id"}}`` with
  the HTTP status Graph uses; a bad token gets code 190 (HTTP 401).
* With ``enforce_window`` on, a free-form message to a user who has not written in
  24 hours is accepted and then fails asynchronously with error 131047 in a
  ``failed`` status, as the Cloud API does; templates always go.

Webhook side: ``deliver`` POSTs a payload to ``webhook_url`` signed with
``X-Hub-Signature-256: sha256=HMAC-SHA256(app_secret, body)``; deliveries not
answered 200 are kept for ``redeliver_pending`` (Meta retries them); ``statuses``
builds the ``sent``/``delivered``/``read``/``failed`` notifications for what was sent.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from tests.fakes.files import FileShelf

TOKEN = "EAAGfakeWhatsAppAccessToken0123456789abcdef"
APP_SECRET = "f3e2d1c0b9a8fake0app0secret77665544"
VERIFY_TOKEN = "verify-me-0123456789"
PHONE_NUMBER_ID = "106540352242922"
DISPLAY_NUMBER = "15550783881"
WABA_ID = "102290129340398"
API_VERSION = "23.0"
MB = 1_000_000
#: media upload: type -> its size cap (Cloud API media reference, supported media types)
UPLOAD_CAPS = {
    "image/jpeg": 5 * MB, "image/png": 5 * MB, "text/plain": 100 * MB,
    "application/pdf": 100 * MB, "application/msword": 100 * MB,
    "application/vnd.ms-excel": 100 * MB, "application/vnd.ms-powerpoint": 100 * MB,
    **{f"application/vnd.openxmlformats-officedocument.{kind}": 100 * MB for kind in (
        "wordprocessingml.document", "spreadsheetml.sheet", "presentationml.presentation")},
}


def sign(body: bytes, secret: str = APP_SECRET) -> str:
    """The ``X-Hub-Signature-256`` value Meta sends with a delivery."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def restamp(payload: dict[str, Any], now: int | None = None) -> dict[str, Any]:
    """A copy whose messages and statuses are stamped ``now``: recorded fixtures are
    old, a live delivery is not."""
    stamp = str(int(time.time()) if now is None else now)
    copy: dict[str, Any] = json.loads(json.dumps(payload))
    for entry in copy.get("entry", []):
        for change in entry.get("changes", []):
            value = change.get("value", {})
            for item in [*value.get("messages", []), *value.get("statuses", [])]:
                if "timestamp" in item:
                    item["timestamp"] = stamp
    return copy


def envelope(value: dict[str, Any]) -> dict[str, Any]:
    """Wrap one ``value`` as a delivery for the fake's phone number."""
    body = {"messaging_product": "whatsapp",
            "metadata": {"display_phone_number": DISPLAY_NUMBER,
                         "phone_number_id": PHONE_NUMBER_ID}, **value}
    return {"object": "whatsapp_business_account",
            "entry": [{"id": WABA_ID, "changes": [{"value": body, "field": "messages"}]}]}


@dataclass
class Failure:
    """A canned Graph API error for the next send."""

    code: int
    status: int = 400
    message: str = "error"
    retry_after: float | None = None


@dataclass
class FakeWhatsApp:
    """The fake; ``await start()``, point ``api_base_url`` at ``base_url``, set
    ``webhook_url`` to the adapter's route to deliver webhooks."""

    token: str = field(default=TOKEN, repr=False)
    app_secret: str = field(default=APP_SECRET, repr=False)
    phone_number_id: str = PHONE_NUMBER_ID
    webhook_url: str = ""
    enforce_window: bool = False
    #: accepted POST /messages bodies, each with the assigned ``wamid``
    sent: list[dict[str, Any]] = field(default_factory=list)
    calls: list[tuple[str, str]] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    #: (payload, HTTP status) of every webhook delivery attempt
    deliveries: list[tuple[dict[str, Any], int]] = field(default_factory=list)
    pending: list[dict[str, Any]] = field(default_factory=list)
    #: failed statuses the API owes (131047), delivered by ``deliver_statuses``
    owed_failures: list[dict[str, Any]] = field(default_factory=list)
    #: wa_id -> when that user last wrote (set by deliveries of their messages)
    last_inbound: dict[str, int] = field(default_factory=dict)
    #: accept this many sends, then drop the connection without an answer
    drop_after_accept: int = 0

    def __post_init__(self) -> None:
        #: media the Graph API knows: media id -> bytes (GET /<id>, then its URL)
        self.media = FileShelf(self.token)
        #: media uploaded by the adapter: media id -> (file name, MIME type)
        self.uploads: dict[str, tuple[str, str]] = {}
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._ids = itertools.count(1)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/v{ver}/{phone}", self._phone)
        app.router.add_post("/v{ver}/{phone}/messages", self._messages)
        app.router.add_post("/v{ver}/{phone}/media", self._upload)
        app.router.add_get("/media/{id}",
                           lambda r: self.media.serve(r, r.match_info["id"]))
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def fail_next(self, failure: Failure) -> None:
        self.failures.append(failure)

    # -- Graph API ---------------------------------------------------------------

    def _error(self, code: int, message: str, status: int, details: str = "",
               headers: dict[str, str] | None = None) -> web.Response:
        error: dict[str, Any] = {"message": f"(#{code}) {message}", "type": "OAuthException",
                                 "code": code, "fbtrace_id": f"AfakeTrace{next(self._ids)}"}
        if details:
            error["error_data"] = {"messaging_product": "whatsapp", "details": details}
        return web.json_response({"error": error}, status=status, headers=headers)

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        return header.startswith("Bearer ") and hmac.compare_digest(
            header[len("Bearer "):].encode(), self.token.encode())

    async def _phone(self, request: web.Request) -> web.Response:
        self.calls.append(("GET", request.path))
        if not self._authorized(request):
            return self._error(190, "Invalid OAuth access token", 401)
        data = self.media.files.get(request.match_info["phone"])
        if data is not None:  # Retrieve Media URL: a media id in place of a phone id
            media_id = request.match_info["phone"]
            return web.json_response({
                "messaging_product": "whatsapp", "url": f"{self.base_url}/media/{media_id}",
                "mime_type": "application/octet-stream", "file_size": len(data),
                "sha256": hashlib.sha256(data).hexdigest(), "id": media_id})
        if request.match_info["phone"] != self.phone_number_id:
            return self._error(100, "Unsupported get request", 400)
        return web.json_response({
            "id": self.phone_number_id, "display_phone_number": "+1 555-078-3881",
            "verified_name": "Claw Assistant", "quality_rating": "GREEN",
            "code_verification_status": "VERIFIED", "platform_type": "CLOUD_API",
        })

    async def _upload(self, request: web.Request) -> web.Response:
        self.calls.append(("POST", request.path))
        if not self._authorized(request):
            return self._error(190, "Invalid OAuth access token", 401)
        fields: dict[str, str] = {}
        file: tuple[str, str, bytes] | None = None
        async for part in await request.multipart():
            if not isinstance(part, aiohttp.BodyPartReader):
                continue
            if part.name == "file":
                file = (part.filename or "", part.headers.get("Content-Type", ""),
                        bytes(await part.read()))
            elif part.name:
                fields[part.name] = await part.text()
        if fields.get("messaging_product") != "whatsapp" or file is None:
            return self._error(100, "Invalid parameter", 400, "file and messaging_product")
        name, mime, data = file
        cap = UPLOAD_CAPS.get(fields.get("type") or mime)
        if cap is None:
            return self._error(100, "Invalid parameter", 400,
                               f"Param file must be a file of a supported type, not {mime}")
        if len(data) > cap:
            return self._error(131053, "Media upload error", 400, "file too large")
        media_id = f"{next(self._ids):015d}"
        self.media.files[media_id] = data
        self.uploads[media_id] = (name, mime)
        return web.json_response({"id": media_id})

    async def _messages(self, request: web.Request) -> web.Response:
        self.calls.append(("POST", request.path))
        if not self._authorized(request):
            return self._error(190, "Invalid OAuth access token", 401)
        if request.match_info["phone"] != self.phone_number_id:
            return self._error(100, "Invalid parameter", 400, "unknown phone number id")
        if self.failures:
            f = self.failures.pop(0)
            headers = {"Retry-After": str(int(f.retry_after))} if f.retry_after else None
            return self._error(f.code, f.message, f.status, f.message, headers)
        body = await request.json()
        problem = _invalid(body)
        if problem:
            return self._error(100, "Invalid parameter", 400, problem)
        wamid = f"wamid.FAKE{next(self._ids):08d}"
        self.sent.append({**body, "wamid": wamid})
        to = str(body.get("to") or body["recipient"])
        last = self.last_inbound.get(to)
        closed = last is None or time.time() - last >= 24 * 3600
        if self.enforce_window and body["type"] != "template" and \
                body.get("recipient_type") != "group" and closed:
            self.owed_failures.append(self.status(self.sent[-1], "failed", error=(
                131047, "Re-engagement message",
                "Message failed to send because more than 24 hours have passed since the "
                "customer last replied to this number.")))
        answer: dict[str, Any] = {"messaging_product": "whatsapp",
                                  "contacts": [{"input": to, "wa_id": to}],
                                  "messages": [{"id": wamid}]}
        if body["type"] == "template":
            answer["messages"][0]["message_status"] = "accepted"
        if self.drop_after_accept > 0:
            self.drop_after_accept -= 1
            assert request.transport is not None
            request.transport.close()  # sent, but the client never hears of it
        return web.json_response(answer)

    # -- webhooks ----------------------------------------------------------------

    def status(self, sent: dict[str, Any], status: str,
               error: tuple[int, str, str] | None = None) -> dict[str, Any]:
        """The status notification for one sent message."""
        item: dict[str, Any] = {"id": sent["wamid"], "status": status,
                                "timestamp": str(int(time.time())),
                                "recipient_id": str(sent.get("to") or sent["recipient"])}
        if "biz_opaque_callback_data" in sent:
            item["biz_opaque_callback_data"] = sent["biz_opaque_callback_data"]
        if error is not None:
            code, title, details = error
            item["errors"] = [{"code": code, "title": title, "message": title,
                               "error_data": {"details": details}}]
        return envelope({"statuses": [item]})

    async def deliver_statuses(self, *statuses: str) -> list[int]:
        """Deliver ``statuses`` for every message sent so far, then any owed failure."""
        answers = [await self.deliver(self.status(s, st)) for s in self.sent for st in statuses]
        owed, self.owed_failures = self.owed_failures, []
        return answers + [await self.deliver(p) for p in owed]

    async def deliver(self, payload: dict[str, Any], *, fresh: bool = True,
                      signature: str | None = "sign", body: bytes | None = None) -> int:
        """POST one delivery to ``webhook_url``; returns the HTTP status. ``fresh``
        stamps it now; ``signature`` None sends none, another string sends that one."""
        if fresh:
            payload = restamp(payload)
        raw = body if body is not None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        if signature == "sign":
            headers["X-Hub-Signature-256"] = sign(raw, self.app_secret)
        elif signature is not None:
            headers["X-Hub-Signature-256"] = signature
        try:
            async with aiohttp.ClientSession() as session, \
                    session.post(self.webhook_url, data=raw, headers=headers) as response:
                await response.read()
                status = response.status
        except aiohttp.ClientConnectorError:
            status = 0  # nobody listening (a gateway restarting): Meta retries later
        self.deliveries.append((payload, status))
        if status == 200:
            for entry in payload.get("entry", []):
                for change in entry.get("changes", []):
                    for msg in change.get("value", {}).get("messages", []):
                        who = msg.get("from") or msg.get("from_user_id")
                        self.last_inbound[str(who)] = int(msg["timestamp"])
        elif (status == 0 or status >= 500) and signature == "sign":
            self.pending.append(payload)
        return status

    async def redeliver_pending(self) -> None:
        pending, self.pending = self.pending, []
        for payload in pending:
            await self.deliver(payload)

    async def handshake(self, token: str, challenge: str = "1158201444",
                        mode: str = "subscribe") -> tuple[int, str]:
        """Meta's subscription check: GET with hub.mode/verify_token/challenge."""
        params = {"hub.mode": mode, "hub.verify_token": token, "hub.challenge": challenge}
        async with aiohttp.ClientSession() as session, \
                session.get(self.webhook_url, params=params) as response:
            return response.status, await response.text()


def _invalid(body: Any) -> str:
    """Why a /messages body would be refused ("" when it is fine)."""
    if not isinstance(body, dict) or body.get("messaging_product") != "whatsapp":
        return "messaging_product must be whatsapp"
    if not (body.get("to") or body.get("recipient")) or \
            body.get("recipient_type") not in ("individual", "group"):
        return "to (a number or group id) or recipient (a BSUID), and recipient_type"
    kind = body.get("type")
    if kind == "text":
        text = body.get("text", {}).get("body", "")
        if not text or len(text) > 4096:
            return "text.body must be 1..4096 characters"
        return ""
    if kind in ("image", "document"):
        media = body.get(kind, {})
        if not media.get("id") and not media.get("link"):
            return f"{kind}.id or {kind}.link is required"
        if len(media.get("caption") or "") > 1024:
            return f"{kind}.caption must be at most 1024 characters"
        return ""
    if kind == "template":
        template = body.get("template", {})
        if not template.get("name") or not template.get("language", {}).get("code"):
            return "template.name and template.language.code are required"
        return ""
    return f"unsupported type {kind!r}"
