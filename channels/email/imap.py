"""One IMAP connection (aioimaplib), with the few commands the adapter uses.

Every server answer other than OK becomes a ``channels.errors`` exception: a refused
login is ``PermanentError("auth_failed")``; NO/BAD to a command and lost connections
are ``NetworkError`` (the receive loop reconnects with backoff).
"""

from __future__ import annotations

import asyncio
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aioimaplib

from channels.email.settings import EmailSettings
from channels.errors import NetworkError, PermanentError

log = logging.getLogger(__name__)

_UIDVALIDITY = re.compile(rb"\[UIDVALIDITY (\d+)\]")
_UIDNEXT = re.compile(rb"\[UIDNEXT (\d+)\]")
_FETCH_UID = re.compile(rb"UID (\d+)")
_SIZE = re.compile(rb"RFC822\.SIZE (\d+)")
_GM_THRID = re.compile(rb"X-GM-THRID (\d+)")

#: what a lost or unreachable server raises (aioimaplib's own errors, socket errors, timeouts)
_UNREACHABLE = (TimeoutError, OSError, aioimaplib.AioImapException)

#: An async callable giving the current OAuth2 access token (refreshed as needed).
TokenSource = Callable[[], Awaitable[str]]


@dataclass(frozen=True)
class Selected:
    uidvalidity: int
    uidnext: int


@dataclass(frozen=True)
class MessageInfo:
    uid: int
    size: int
    gm_thread_id: str | None


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


class ImapSession:
    """A logged-in connection; ``async with ImapSession(...)`` connects and logs out."""

    def __init__(
        self,
        settings: EmailSettings,
        *,
        password: str | None = None,
        token: TokenSource | None = None,
    ) -> None:
        self._settings = settings
        self._password = password
        self._token = token
        self._client: aioimaplib.IMAP4 | None = None
        self._lost = asyncio.Event()  # the server closed the connection

    def __repr__(self) -> str:
        return f"ImapSession({self._settings.imap_host}:{self._settings.imap_port_resolved})"

    @property
    def client(self) -> aioimaplib.IMAP4:
        if self._client is None:
            raise NetworkError("imap: not connected")
        return self._client

    @property
    def gmail(self) -> bool:
        return bool(self.client.has_capability("X-GM-EXT-1"))

    async def __aenter__(self) -> ImapSession:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> None:
        s = self._settings
        try:
            # IMAP4 with an ssl_context rather than IMAP4_SSL: only IMAP4 takes the
            # connection-lost callback that ends an IDLE on a dead connection at once
            client = aioimaplib.IMAP4(
                host=s.imap_host, port=s.imap_port_resolved, timeout=s.timeout,
                conn_lost_cb=lambda _exc: self._lost.set(),
                ssl_context=ssl.create_default_context() if s.imap_security == "tls" else None,
            )
            self._client = client
            await client.wait_hello_from_server()
            if self._token is not None:
                response = await client.xoauth2(s.login, await self._token())  # type: ignore[arg-type]
            else:
                response = await client.login(s.login, self._password or "")
        except _UNREACHABLE as err:
            raise NetworkError(f"imap: cannot reach {s.imap_host}: {type(err).__name__}") from None
        if response.result != "OK":
            raise PermanentError(
                "auth_failed", f"imap login for {s.login} refused: {_text(response.lines)}"
            )

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        if self._lost.is_set():  # nothing to log out from; drop the socket
            transport = getattr(client.protocol, "transport", None)
            if transport is not None:
                transport.close()
            return
        try:
            if client.has_pending_idle():
                client.idle_done()
            await asyncio.wait_for(client.logout(), 2)
        except Exception as err:  # closing a possibly dead connection
            log.debug("imap: logout failed: %s", type(err).__name__)

    async def _ok(self, what: str, response: aioimaplib.Response) -> aioimaplib.Response:
        if response.result != "OK":
            raise NetworkError(f"imap {what}: {response.result} {_text(response.lines)}")
        return response

    async def _run(self, what: str, call: Awaitable[aioimaplib.Response]) -> aioimaplib.Response:
        try:
            return await self._ok(what, await call)
        except _UNREACHABLE as err:
            raise NetworkError(f"imap {what}: {type(err).__name__}") from None

    async def select(self, folder: str) -> Selected:
        try:
            response = await self.client.select(_quote(folder))
        except _UNREACHABLE as err:
            raise NetworkError(f"imap select: {type(err).__name__}") from None
        if response.result == "NO" and _missing(response.lines):
            raise PermanentError(
                "folder_missing", f"folder {folder!r} does not exist on the server; check the "
                "folder/sent_folder setting (Gmail: a label name, or '[Gmail]/Sent Mail')"
            )
        await self._ok("select", response)
        joined = b"\n".join(bytes(line) for line in response.lines)
        validity, uidnext = _UIDVALIDITY.search(joined), _UIDNEXT.search(joined)
        if validity is None or uidnext is None:
            raise NetworkError("imap select: no UIDVALIDITY/UIDNEXT in the answer")
        return Selected(int(validity.group(1)), int(uidnext.group(1)))

    async def search(self, *criteria: str) -> list[int]:
        response = await self._run("search", self.client.uid_search(*criteria))
        first = bytes(response.lines[0]) if response.lines else b""
        return [int(n) for n in first.split() if n.isdigit()]

    async def uids_after(self, last_uid: int) -> list[int]:
        # "n:*" always includes the highest UID, even below n (RFC 3501 6.4.8)
        return sorted(u for u in await self.search("UID", f"{last_uid + 1}:*") if u > last_uid)

    async def info(self, uid: int) -> MessageInfo | None:
        items = "(UID RFC822.SIZE X-GM-THRID)" if self.gmail else "(UID RFC822.SIZE)"
        response = await self._run("fetch", self.client.uid("fetch", str(uid), items))
        for line in response.lines:
            line = bytes(line)
            found = _FETCH_UID.search(line)
            if found and int(found.group(1)) == uid:
                size = _SIZE.search(line)
                thread = _GM_THRID.search(line)
                return MessageInfo(
                    uid, int(size.group(1)) if size else 0,
                    thread.group(1).decode() if thread else None,
                )
        return None  # expunged meanwhile

    async def body(self, uid: int, part: str = "", octets: int | None = None) -> bytes | None:
        """The raw message (or ``part``, e.g. "HEADER", "2.1"), without setting \\Seen;
        with ``octets``, its first that many octets only (a partial FETCH: the server
        sends no more)."""
        partial = f"<0.{octets}>" if octets is not None else ""
        response = await self._run(
            "fetch", self.client.uid("fetch", str(uid), f"(UID BODY.PEEK[{part}]{partial})")
        )
        return next((bytes(line) for line in response.lines if isinstance(line, bytearray)),
                    None)

    async def move(self, uid: int, folder: str) -> None:
        """Move ``uid`` of the selected folder to ``folder``, marked \\Seen: UID MOVE
        (RFC 6851) where offered, else COPY, then \\Deleted and (with UIDPLUS,
        RFC 4315) UID EXPUNGE of that one mail; without UIDPLUS it stays flagged
        \\Deleted, as a plain EXPUNGE would remove the user's deleted mail too."""
        client = self.client
        await self._run("store", client.uid("store", str(uid), "+FLAGS", "(\\Seen)"))
        if client.has_capability("MOVE"):
            await self._run("move", client.uid("move", str(uid), _quote(folder)))
            return
        await self._run("copy", client.uid("copy", str(uid), _quote(folder)))
        await self._run("store", client.uid("store", str(uid), "+FLAGS", "(\\Deleted)"))
        if client.has_capability("UIDPLUS"):
            await self._run("expunge", client.uid("expunge", str(uid)))

    async def wait_for_news(self, timeout: float) -> None:
        """IDLE until the server announces a change or ``timeout`` passes (RFC 2177).
        Raises ``NetworkError`` as soon as the connection is lost or the server says BYE
        (a restart, an admin's kick), so the receive loop reconnects at once."""
        client = self.client
        try:
            idle = await client.idle_start(timeout=timeout)
            try:
                while True:
                    pushed = await self._push_or_loss(client, timeout + 5)
                    if pushed == aioimaplib.STOP_WAIT_SERVER_PUSH:
                        break
                    lines = [bytes(p) for p in pushed] if isinstance(pushed, list) else []
                    if any(b"BYE" in line for line in lines):
                        self._lost.set()
                        raise NetworkError("imap idle: the server closed the connection (BYE)")
                    if any(line.endswith((b"EXISTS", b"EXPUNGE")) for line in lines):
                        break
            finally:
                if not self._lost.is_set():
                    if client.has_pending_idle():
                        client.idle_done()
                    await asyncio.wait_for(idle, self._settings.timeout)
        except _UNREACHABLE as err:
            raise NetworkError(f"imap idle: {type(err).__name__}") from None

    async def _push_or_loss(self, client: aioimaplib.IMAP4, timeout: float) -> object:
        push = asyncio.ensure_future(client.wait_server_push(timeout=timeout))
        lost = asyncio.ensure_future(self._lost.wait())
        try:
            await asyncio.wait({push, lost}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            lost.cancel()
        if not push.done():
            push.cancel()
            raise NetworkError("imap idle: connection lost")
        return push.result()

    async def noop(self) -> None:
        await self._run("noop", self.client.noop())


def _missing(lines: list[bytes]) -> bool:
    """A NO for a folder that does not exist ([NONEXISTENT], RFC 5530, or its words)."""
    text = _text(lines).lower()
    return "nonexistent" in text or "doesn't exist" in text or "unknown mailbox" in text


def _text(lines: list[bytes]) -> str:
    return " ".join(bytes(line).decode(errors="replace") for line in lines)[:300]
