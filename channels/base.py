"""The seam every platform adapter implements."""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from channels.errors import PermanentError
from channels.models import Attachment, Inbound, Outbound

if TYPE_CHECKING:
    from typing import Self

    from aiohttp import web

#: Called by an adapter for each normalized inbound message. It returns only once the
#: message is durable (or deliberately dropped); it raises if it could not be made
#: durable, and the adapter must then NOT ack the platform / advance its cursor.
InboundSink = Callable[[Inbound], Awaitable[str | None]]  # what the gateway did, if it says


@dataclass(frozen=True)
class DeliveryReport:
    """What became of one reply chunk, learned after the send returned (a WhatsApp
    ``failed`` status arrives by webhook later): ``delivered`` with the platform's
    message id, or failed for good with ``reason``."""

    channel: str
    account: str
    chat_id: str
    reply_id: str
    index: int
    delivered: bool
    detail: str  # the platform message id, or the reason it failed


#: Where an adapter reports such late outcomes; the gateway records them with the
#: outbox's own (gateway/outgoing/_delivery.py). Raises if the outcome could not be recorded.
OutcomeSink = Callable[[DeliveryReport], Awaitable[None]]


#: The ``CursorStore`` key under which an adapter records the inbound it skipped for
#: good, never queued (a mail too big or unreadable): JSON, a list of objects with at
#: least ``reason`` and ``at`` (ISO time), newest last. ``pynanoclaw status``, ``dead
#: list`` and ``/healthz`` show them.
SKIPPED_KEY = "dead_letters"


@runtime_checkable
class CursorStore(Protocol):
    """Durable small key/value store for an adapter's cursors (poll offsets, sync tokens).

    The gateway passes one already scoped to the adapter's channel and account (backed by
    Redis), so ``key`` is just a short name such as ``"offset"``. Move a cursor only after
    the messages before it went through the sink.
    """

    async def get(self, key: str) -> str | None: ...

    async def set(self, key: str, value: str) -> None: ...


class MemoryCursors:
    """A ``CursorStore`` in memory, for an adapter (part) the gateway bound no store to
    (unit tests): nothing survives the process."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    async def get(self, key: str) -> str | None:
        return self.values.get(key)

    async def set(self, key: str, value: str) -> None:
        self.values[key] = value


@dataclass(frozen=True)
class ChannelContext:
    """What the gateway hands an adapter beside its account name, config block and
    secrets (``gateway/app.py``, ``build_channels``). Adapters read no environment
    variable of their own: this is how they learn where the gateway keeps its data
    (``data_dir``: an adapter's files go under ``<data_dir>/<channel>/<account>``) and
    which Redis the gateway uses (``redis_url``). The cursor store comes later, with
    ``Channel.bind``: the gateway sizes its Redis pool from the adapters it built."""

    data_dir: Path | None = None
    redis_url: str | None = None


#: the context of an adapter built outside the gateway (unit tests)
NO_CONTEXT = ChannelContext()


@dataclass(frozen=True)
class ChannelLimits:
    """What a platform allows per message and per chat.

    ``measure`` counts what the platform counts (Telegram counts UTF-16 code units).
    ``per_chat_interval`` is the minimum spacing between two sends to one chat, in
    seconds; ``burst`` how many may go at once before the spacing applies.
    """

    max_message_len: int
    measure: Callable[[str], int] = len
    per_chat_interval: float = 1.0
    burst: int = 1


@dataclass(frozen=True)
class Chunk:
    """One platform message of a split reply: formatted text and its plain fallback."""

    text: str
    plain: str
    formatted: bool = True


class Channel(abc.ABC):
    """A platform adapter: translates platform events to ``Inbound`` and ``Outbound``
    to platform API calls. Nothing else: no routing, memory or model here.

    Life cycle: ``await start(sink)`` begins receiving (returns once connected, keeps
    receiving in background tasks); ``await stop()`` stops cleanly. The gateway's outbox
    calls ``render`` then ``send_chunk`` once per chunk, owning idempotency, rate limits
    and retries; the adapter maps platform errors onto ``channels.errors``.
    """

    #: platform name, used in group keys and config blocks
    name: str
    #: configured account name (one config block = one account)
    account: str = "default"
    limits: ChannelLimits
    #: set by the gateway through ``bind`` before ``start``; None in unit tests
    cursor_store: CursorStore | None = None
    #: set by the gateway through ``bind_outcomes``; None in unit tests
    outcome_sink: OutcomeSink | None = None

    @classmethod
    def from_config(cls, account: str, block: dict[str, Any], env: Mapping[str, str],
                    context: ChannelContext = NO_CONTEXT) -> Self:
        """Build the adapter from its ``[channels.<name>]`` config block.

        Validates ``block`` (raise ``ValueError``/pydantic ``ValidationError`` naming the
        key), reads secrets from ``env`` (the variables the block names) and anything
        else from ``context``. Every adapter the gateway loads overrides it.
        """
        raise NotImplementedError(f"{cls.__name__} cannot be built from a config block")

    def bind(self, cursor_store: CursorStore) -> None:
        """Give the adapter its durable cursor store (the gateway calls it before start)."""
        self.cursor_store = cursor_store

    def bind_outcomes(self, sink: OutcomeSink) -> None:
        """Where to report delivery outcomes learned after ``send_chunk`` returned."""
        self.outcome_sink = sink

    def web_routes(self) -> list[web.RouteDef]:
        """Webhook endpoints the gateway mounts on its one web app; default: none."""
        return []

    def webhook_concurrency(self) -> int:
        """Most webhook requests the platform is configured to make at once (Telegram's
        ``max_connections``), so the gateway sizes its Redis pool; 0 (default): no
        webhooks, or a platform whose concurrency no setting bounds."""
        return 0

    @abc.abstractmethod
    async def start(self, sink: InboundSink) -> None: ...

    @abc.abstractmethod
    async def stop(self) -> None: ...

    @abc.abstractmethod
    def render(self, text: str) -> list[Chunk]:
        """Convert the model's Markdown to the platform's format and split it to the
        platform's limit. Pure: same text, same chunks (so retries re-send identically).
        """

    @abc.abstractmethod
    async def send_chunk(self, message: Outbound, chunk: Chunk, index: int) -> str:
        """Send one chunk; return the platform's message id. Threads/replies to
        ``message.reply_to_id``/``thread_id`` as the platform allows. Falls back to
        ``chunk.plain`` itself when the platform rejects the formatting.
        """

    async def find_sent(self, message: Outbound, index: int) -> str | None:
        """After an ambiguous send (``MaybeSent``) of chunk ``index``: the platform id of
        that chunk if the platform shows it arrived, so the outbox does not send it again.
        Default ``None``: this platform cannot look a sent message up (the outbox re-sends;
        a platform idempotency key, where the adapter sends one, dedupes that re-send)."""
        return None

    async def send_file(self, message: Outbound, data: bytes, name: str, caption: str = ""
                        ) -> str:
        """Send one file (``data``, shown as ``name``, with ``caption``) to
        ``message``'s chat and thread; return the platform's message id. The outbox
        sends it once per ``message.reply_id`` (index 0). Default: this platform cannot
        send files (``PermanentError``: the chat gets a text note instead)."""
        raise PermanentError("this platform cannot send files", self.name)

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """Download one attachment this adapter put on an ``Inbound`` (from its ``id``/
        ``url``, with the adapter's own token). Called on the gateway side after the
        message is durable, never before the ack. Reads at most ``max_bytes`` and raises
        ``AttachmentTooLarge`` past it (without reading the rest); ``PermanentError`` when
        the platform says the file is gone or refused; ``TransientError`` to try again.
        Default: this platform's files cannot be downloaded."""
        raise PermanentError("not downloadable", f"{self.name} has no file download")

    async def check(self) -> str | None:
        """Ask the platform whether this channel's credentials are accepted (Telegram
        getMe, Slack auth.test, Discord /users/@me), for ``pynanoclaw status``: returns
        who the bot is, raises ``PermanentError`` for a refused credential and
        ``TransientError`` when the platform cannot be reached. ``None``: this adapter
        has no such check (its start is the check)."""
        return None

    def health(self) -> dict[str, Any]:
        """This adapter's status for the gateway's ``/healthz`` (JSON-able); default:
        nothing to report. Informational: it does not make ``/healthz`` fail."""
        return {}

    async def typing(self, chat_id: str, thread_id: str | None = None) -> None:  # noqa: B027
        """Show a typing indicator where the platform has one; default: nothing."""

    async def register_commands(self, commands: list[tuple[str, str]]) -> None:  # noqa: B027
        """Publish the chat commands ((name, description), names without "/") in the
        platform's command registry where it has one the bot can write at run time
        (Telegram ``setMyCommands``). Default: nothing (Slack's slash commands live in
        the app manifest). Called once after ``start``; a failure is logged, not fatal."""

    async def turn_done(  # noqa: B027
        self, chat_id: str, thread_id: str | None, message_ids: list[str], reply_id: str | None
    ) -> None:
        """A turn covering ``message_ids`` finished, after its reply chunks (if any, under
        ``reply_id``) were sent. Default: nothing (the local channel tells its clients)."""
