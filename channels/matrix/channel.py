"""``MatrixChannel``: a Matrix bot account through matrix-nio, /sync in, room_send out."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nio import (
    AsyncClient,
    AsyncClientConfig,
    LoginResponse,
    RoomSendResponse,
    UploadResponse,
    WhoamiResponse,
)
from nio.crypto import ENCRYPTION_ENABLED
from nio.exceptions import LocalProtocolError, SendRetryError
from pydantic import SecretStr

from channels.base import (
    NO_CONTEXT,
    Channel,
    ChannelContext,
    ChannelLimits,
    Chunk,
    InboundSink,
)
from channels.errors import PermanentError, TransientError, mapped
from channels.matrix.errors import NETWORK_ERRORS, map_error, network_error
from channels.matrix.media import download
from channels.matrix.normalize import BotIdentity
from channels.matrix.render import MATRIX_TEXT_LIMIT, render_chunks
from channels.matrix.session import Session, load_session, save_session
from channels.matrix.settings import MatrixSettings
from channels.matrix.syncer import SYNC_GRACE, Syncer
from channels.models import Attachment, Outbound
from channels.split import utf8_len
from channels.tasks import start_task

if TYPE_CHECKING:
    from typing import Self

log = logging.getLogger(__name__)

#: Matrix has no published per-room send limit; Synapse's default ``rc_message`` is
#: 0.2 messages/s with a burst of 10 per user, and its ``retry_after_ms`` covers the rest.
MATRIX_LIMITS = ChannelLimits(
    max_message_len=MATRIX_TEXT_LIMIT, measure=utf8_len, per_chat_interval=1.0, burst=5
)
#: how long ``start`` waits for the first sync before returning anyway (the loop goes on)
FIRST_SYNC_WAIT = 60.0
#: how long ``stop`` waits for the sync loop and the HTTP session to close
STOP_WAIT = 10.0


def transaction_id(reply_id: str, index: int) -> str:
    """The send's transaction id: the same reply chunk always gets the same one, so a
    retried send is deduplicated by the homeserver (per device)."""
    digest = hashlib.sha256(reply_id.encode()).hexdigest()[:32]
    return f"pnc-{digest}-{index}"


class MatrixChannel(Channel):
    """A Matrix bot account: /sync long polling in, ``m.room.message`` out."""

    name = "matrix"
    limits = MATRIX_LIMITS

    def __init__(
        self,
        settings: MatrixSettings,
        store_dir: Path,
        *,
        access_token: SecretStr | None = None,
        password: SecretStr | None = None,
        account: str = "default",
    ) -> None:
        self.settings = settings
        self.store_dir = store_dir
        self.account = account
        self._access_token = access_token
        self._password = password
        self.encrypted = settings.encryption and ENCRYPTION_ENABLED
        if settings.encryption and not ENCRYPTION_ENABLED:
            log.warning("matrix: encryption = true but matrix-nio's e2e extra is not installed;"
                        " encrypted rooms will be reported and skipped")
        self._client = AsyncClient(
            settings.homeserver,
            settings.user_id,
            store_path=str(store_dir),
            config=AsyncClientConfig(
                max_limit_exceeded=0,  # 429s come back to us (RateLimited), never slept on
                max_timeouts=0,  # network errors too: the outbox and sync loop retry
                request_timeout=settings.sync_timeout + SYNC_GRACE,
                encryption_enabled=self.encrypted,
                store_sync_tokens=False,  # the cursor store owns next_batch
            ),
        )
        self.identity = BotIdentity(settings.user_id)
        self.syncer: Syncer | None = None
        self._task: asyncio.Task[None] | None = None

    def __repr__(self) -> str:
        return f"MatrixChannel(account={self.account!r}, user={self.settings.user_id!r})"

    @classmethod
    def from_config(cls, account: str, block: dict[str, Any], env: Mapping[str, str],
                    context: ChannelContext = NO_CONTEXT) -> Self:
        settings = MatrixSettings.model_validate(block)
        token = env.get(settings.access_token_env, "").strip()
        password = env.get(settings.password_env, "").strip()
        store_dir = settings.store_dir
        if store_dir is None:
            if context.data_dir is None:
                raise ValueError("channels.matrix: set store_dir (where the bot's device and "
                                 "keys are kept)")
            store_dir = context.data_dir / "matrix" / account
        if not token and not password and load_session(
            store_dir, settings.homeserver, settings.user_id
        ) is None:
            raise ValueError(
                f"channels.matrix: set the environment variable {settings.access_token_env} "
                f"(the bot's access token) or {settings.password_env} (its password)"
            )
        return cls(
            settings, store_dir, account=account,
            access_token=SecretStr(token) if token else None,
            password=SecretStr(password) if password else None,
        )  # fmt: skip

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The file of an ``m.image``/``m.audio``/``m.video``/``m.file`` event from the
        media repository, decrypted when it came from an encrypted room."""
        token = self._client.access_token
        if not token:  # not started yet: the stored session, else the configured token
            stored = load_session(self.store_dir, self.settings.homeserver,
                                  self.settings.user_id)
            secret = stored.access_token if stored else self._access_token
            token = secret.get_secret_value() if secret else ""
        if not token:
            raise TransientError("matrix: not logged in yet")
        return await download(self.settings.homeserver, token, attachment, max_bytes)

    async def start(self, sink: InboundSink) -> None:
        """Log in (or restore the stored device), then run the sync loop; returns after
        the first sync. Raises PermanentError when the homeserver refuses the
        credentials, NetworkError when it cannot be reached."""
        self.store_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            session = await self._login()
            self._client.restore_login(session.user_id, session.device_id,
                                       session.access_token.get_secret_value())
            profile: Any = await self._client.get_displayname(self.settings.user_id)
        except NETWORK_ERRORS as error:
            await self._client.close()
            raise network_error(error) from None
        except PermanentError:
            await self._client.close()
            raise
        name = getattr(profile, "displayname", None)
        self.identity = BotIdentity(self.settings.user_id, name if isinstance(name, str) else None)
        self.syncer = Syncer(self._client, self.settings, self.identity, sink,
                             self.cursor_store, self.account)
        self._task = start_task(self.syncer.loop.run(), name=f"matrix-sync-{self.account}",
                                log=log, what="matrix: sync loop")
        ready = asyncio.create_task(self.syncer.loop.ready.wait())
        await asyncio.wait({ready, self._task}, timeout=FIRST_SYNC_WAIT,
                           return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if (fatal := self.syncer.loop.fatal) is not None:
            await self.stop()
            raise PermanentError(fatal, "matrix: the homeserver refused the session")

    async def _login(self) -> Session:
        """The device to use: the stored one if its token still matches the configured
        one, else the configured token (whoami names its device), else a password login
        (a new device, stored for the next start)."""
        settings = self.settings
        stored = load_session(self.store_dir, settings.homeserver, settings.user_id)
        configured = self._access_token
        if stored is not None and (
            configured is None or configured.get_secret_value() == stored.access_token
            .get_secret_value()
        ):
            if await self._device_of(stored.access_token) == stored.device_id:
                return stored
            if self._password is None:
                raise PermanentError("unauthorized", "matrix: the stored session was refused; "
                                     f"set {settings.password_env} or a new access token")
            log.warning("matrix: the stored session was refused; logging in again")
            configured = None
        if configured is not None:
            device = await self._device_of(configured)
            if device is None:
                raise PermanentError("unauthorized", "matrix: the access token was refused")
            session = Session(settings.homeserver, settings.user_id, device, configured)
        elif self._password is not None:
            answer = await self._client.login(self._password.get_secret_value(),
                                              device_name=settings.device_name)
            if not isinstance(answer, LoginResponse):
                raise PermanentError("unauthorized", f"matrix: login refused ({map_error(answer)})")
            session = Session(settings.homeserver, settings.user_id, answer.device_id,
                              SecretStr(answer.access_token))
        else:
            raise PermanentError("unauthorized", "matrix: no access token, password or session")
        save_session(self.store_dir, session)
        return session

    async def _device_of(self, token: SecretStr) -> str | None:
        """The device a token belongs to (whoami), None when the homeserver refuses it."""
        self._client.access_token = token.get_secret_value()
        who = await self._client.whoami()
        self._client.access_token = ""
        if isinstance(who, WhoamiResponse) and who.device_id:
            return str(who.device_id)
        if getattr(who, "status_code", None) not in ("M_UNKNOWN_TOKEN", "M_MISSING_TOKEN"):
            raise map_error(who)  # not a verdict on the token (rate limit, server error)
        return None

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            # bounded: a stop must never hang the gateway's shutdown
            _, pending = await asyncio.wait({self._task}, timeout=STOP_WAIT)
            if pending:
                log.warning("matrix: the sync loop did not stop within %.0fs", STOP_WAIT)
            self._task = None
        # a close slower than STOP_WAIT raises TimeoutError: given up on, like a failed one
        with contextlib.suppress(*NETWORK_ERRORS):
            await asyncio.wait_for(self._client.close(), STOP_WAIT)

    def render(self, text: str) -> list[Chunk]:
        return render_chunks(text, self.limits.max_message_len)

    def content(self, message: Outbound, chunk: Chunk, index: int) -> dict[str, Any]:
        """The ``m.room.message`` content of one chunk: HTML plus plain body, in the
        thread (``m.thread``, the first chunk a real reply, later ones falling back) or
        as a reply (``m.in_reply_to``, first chunk only)."""
        content: dict[str, Any] = {"msgtype": self.settings.reply_msgtype, "body": chunk.plain}
        if chunk.formatted:
            content["format"] = "org.matrix.custom.html"
            content["formatted_body"] = chunk.text
        # an empty m.mentions: nothing in the reply's text pings anyone
        content["m.mentions"] = {}
        reply = message.reply_to_id if index == 0 else None
        if message.thread_id:
            content["m.relates_to"] = {
                "rel_type": "m.thread",
                "event_id": message.thread_id,
                "is_falling_back": reply is None,
                "m.in_reply_to": {"event_id": reply or message.reply_to_id or message.thread_id},
            }
        elif reply:
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply}}
        return content

    async def send_chunk(self, message: Outbound, chunk: Chunk, index: int) -> str:
        """Send one chunk with a transaction id derived from (reply id, index), so a
        retry after a lost answer is deduplicated by the homeserver."""
        return await self._room_send(message, self.content(message, chunk, index), index)

    async def send_file(self, message: Outbound, data: bytes, name: str, caption: str = ""
                        ) -> str:
        """Upload to the media repository, then an ``m.file`` event (the caption as its
        body, in the thread if any) with the transaction id of (reply id, 0): a re-send
        after a lost answer is deduplicated like a chunk. Not for encrypted rooms' media
        (the upload is not encrypted: such a room gets the text note instead)."""
        room = self._client.rooms.get(message.chat_id)
        if room is not None and room.encrypted:
            raise PermanentError("encrypted room", "matrix: files are not sent to E2EE rooms")
        with mapped(NETWORK_ERRORS, network_error):
            uploaded, _ = await self._client.upload(
                io.BytesIO(data), content_type="application/octet-stream", filename=name,
                filesize=len(data))
        if not isinstance(uploaded, UploadResponse):
            raise map_error(uploaded)
        content: dict[str, Any] = {
            "msgtype": "m.file", "body": caption or name, "filename": name,
            "url": uploaded.content_uri, "m.mentions": {},
            "info": {"size": len(data), "mimetype": "application/octet-stream"}}
        if message.thread_id:
            content["m.relates_to"] = {"rel_type": "m.thread", "event_id": message.thread_id,
                                       "is_falling_back": True,
                                       "m.in_reply_to": {"event_id": message.thread_id}}
        return await self._room_send(message, content, 0)

    async def _room_send(self, message: Outbound, content: dict[str, Any], index: int) -> str:
        try:
            answer = await self._client.room_send(
                message.chat_id, "m.room.message", content,
                tx_id=transaction_id(message.reply_id, index),
                ignore_unverified_devices=True,  # a bot cannot verify devices interactively
            )
        except NETWORK_ERRORS as error:
            raise network_error(error) from None
        except LocalProtocolError as error:
            # nio encrypts only for rooms its sync has shown it (members, encryption
            # state); a room joined moments ago appears after the next sync: retry then
            raise TransientError(f"matrix: room not synced yet ({error})") from None
        except SendRetryError as error:
            raise PermanentError("encryption", f"matrix: {error}") from None
        if isinstance(answer, RoomSendResponse):
            return str(answer.event_id)
        raise map_error(answer)

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:
        """Best effort: a failed typing notice is logged, never raised."""
        try:
            answer: Any = await self._client.room_typing(chat_id, True, timeout=30000)
        except NETWORK_ERRORS as error:
            log.info("matrix: typing notice failed (%s)", type(error).__name__)
            return
        if hasattr(answer, "status_code"):
            log.info("matrix: typing notice failed (%s)", map_error(answer))
