"""The shared adapter contract kit: what every platform harness supplies.

A platform joins the contract suite (tests/channels/test_contract.py) by adding

* ``tests/channels/harness_<platform>.py`` exporting ``HARNESSES: list[HarnessSpec]``
  (one spec per receive mode worth testing, e.g. telegram polling and webhook), each
  with a factory returning an async context manager that yields an ``AdapterHarness``:
  its local fake platform server started and the REAL adapter started against it;
* recorded event fixtures ``tests/channels/fixtures/<platform>/<name>.json``, each a
  verbatim platform payload shaped like the platform's docs (a Telegram ``Update``, a
  Slack ``event_callback``, a Discord ``MESSAGE_CREATE`` dispatch ...);
* ``tests/channels/fixtures/<platform>/expected.json``: the normalization table,
  ``{"<fixture name>": {<Inbound field>: <value>, ...} | null}``. ``null`` means the
  adapter deliberately drops that event (the bot's own messages, service events);
  edits and deletions are delivered with ``kind`` and ``original_id`` and every
  platform that has them carries a fixture of each;
  fields not listed are not checked; ``attachments`` is a list of per-attachment
  field subsets, compared in order;
* a line in ``tests/channels/conftest.py: HARNESS_MODULES``.

The harness's ``marker_fixture`` must have an expectation in ``expected.json`` that
identifies it (e.g. its ``message_id``): dropped events are checked by injecting the
marker after them and waiting for exactly the marker.

Nothing else: the suite is parametrized over every registered harness.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from channels.base import Channel, Chunk
from channels.models import Inbound, Outbound

FIXTURES = Path(__file__).parent / "fixtures"

#: How long a harness may take to deliver something before a test fails (not a timing
#: assertion: it only turns a hang into a failure).
WAIT = 10.0


class SinkUnavailable(ConnectionError):
    """What the recording sink raises to play "Redis is down"."""


class RecordingSink:
    """An ``InboundSink`` that records what became durable and can play an outage.

    ``fail_next(n)`` makes the next n calls raise; ``failing = True`` makes every call
    raise until reset. Only calls that returned count as received.
    """

    def __init__(self) -> None:
        self.received: list[Inbound] = []
        self.calls = 0
        self.failing = False
        self._fail_remaining = 0
        self._changed = asyncio.Condition()

    def fail_next(self, count: int = 1) -> None:
        self._fail_remaining = count

    async def __call__(self, inbound: Inbound) -> None:
        async with self._changed:
            self.calls += 1
            self._changed.notify_all()
            if self.failing or self._fail_remaining > 0:
                self._fail_remaining = max(0, self._fail_remaining - 1)
                raise SinkUnavailable("redis unavailable (test sink)")
            self.received.append(inbound)
            self._changed.notify_all()

    async def wait_for(self, count: int, timeout: float = WAIT) -> list[Inbound]:
        """Wait until at least ``count`` inbounds were recorded; return them all."""
        async with self._changed:
            await asyncio.wait_for(
                self._changed.wait_for(lambda: len(self.received) >= count), timeout
            )
            return list(self.received)

    async def wait_calls(self, count: int, timeout: float = WAIT) -> None:
        """Wait until the sink was called ``count`` times (failed calls included)."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: self.calls >= count), timeout)


class MemoryCursorStore:
    """A ``channels.base.CursorStore`` in a dict, keeping every write for assertions."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {}
        self.writes: list[tuple[str, str]] = []

    async def get(self, key: str) -> str | None:
        return self.values.get(key)

    async def set(self, key: str, value: str) -> None:
        self.values[key] = value
        self.writes.append((key, value))


class FlakyCursors(MemoryCursorStore):
    """A cursor store whose first ``failures`` reads fail (Redis down at start)."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    async def get(self, key: str) -> str | None:
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("redis down")
        return await super().get(key)


@dataclass(frozen=True)
class Sent:
    """One message as the fake platform received it, in our terms.

    ``thread_id``/``reply_to_id`` are translated back by the harness into the ids an
    ``Outbound`` uses (Telegram ``message_thread_id``/``reply_parameters.message_id``,
    Slack ``thread_ts``, Discord channel id/``message_reference``), None when absent.
    ``formatted`` says whether the platform was asked to parse markup.
    """

    chat_id: str
    text: str
    thread_id: str | None = None
    reply_to_id: str | None = None
    formatted: bool = False


@dataclass(frozen=True)
class SentFile:
    """One file as the fake platform received it (``Channel.send_file``)."""

    chat_id: str
    name: str
    data: bytes
    caption: str
    thread_id: str | None = None
    #: the MIME type the platform recorded, where the harness can read it
    mime: str | None = None


@runtime_checkable
class AdapterHarness(Protocol):
    """A started fake platform plus the real adapter connected to it."""

    # Read-only members, so a harness may narrow them (``channel: TelegramChannel``).
    @property
    def channel(self) -> Channel:
        """The adapter under test, started with ``sink`` (and bound to ``cursors``)."""
        ...

    @property
    def sink(self) -> RecordingSink: ...

    @property
    def cursors(self) -> MemoryCursorStore: ...

    @property
    def secrets(self) -> list[str]:
        """Every secret the adapter was configured with (tokens, signing secrets)."""
        ...

    @property
    def marker_fixture(self) -> str:
        """A fixture that normalizes to an Inbound; the "flush" after ignored events."""
        ...

    @property
    def quotes_replies(self) -> bool:
        """Whether ``Sent.reply_to_id`` is meaningful (Slack only threads)."""
        ...

    async def inject(self, fixture: str) -> None:
        """Deliver the recorded event the way the platform would, once.

        Returns when the delivery attempt is over for push transports (webhook
        answered, websocket frame sent) or when the event is queued for pull ones.
        """
        ...

    async def redeliver_pending(self) -> None:
        """Do what the platform does for deliveries the adapter did not acknowledge
        (re-POST a webhook that got 5xx, resend an unacked envelope). Pull transports
        need nothing: the event stays until the cursor moves."""
        ...

    async def acked(self, fixture: str) -> bool | None:
        """Whether the platform considers the event delivered (offset persisted past
        it, 2xx answered, envelope acked); None where the protocol has no ack."""
        ...

    def sent(self) -> list[Sent]:
        """Messages the fake received from the adapter, in order."""
        ...

    def fail_next_send(self, status: int, retry_after: float | None = None) -> None:
        """Make the fake answer the next send with the platform's own error for
        ``status``: 429 (with ``retry_after`` seconds), 403 (blocked / no permission:
        permanent), 500 (server error: transient)."""
        ...

    def outbound(self, text: str) -> Outbound:
        """A reply into a group chat the fake knows, threaded and replying to a message."""
        ...

    def chunk_well_formed(self, chunk: Chunk) -> bool:
        """Whether one rendered chunk is well formed for the platform (balanced code
        fences or tags). Kit helpers ``fences_balanced``/``tags_balanced`` fit most."""
        ...


HarnessFactory = Callable[[], AbstractAsyncContextManager[AdapterHarness]]


@dataclass(frozen=True)
class HarnessSpec:
    """One registered harness: ``id`` names it in test ids (``telegram-polling``)."""

    id: str
    platform: str
    factory: HarnessFactory
    #: normalization fixtures that need this receive mode; default: all of the platform's
    fixtures: tuple[str, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def cases(self) -> list[tuple[str, dict[str, Any] | None]]:
        table = expected_table(self.platform)
        names = self.fixtures if self.fixtures is not None else tuple(table)
        return [(name, table[name]) for name in names]


def load_fixture(platform: str, name: str) -> Any:
    """A recorded event payload (parsed JSON)."""
    return json.loads((FIXTURES / platform / f"{name}.json").read_text(encoding="utf-8"))


def expected_table(platform: str) -> dict[str, dict[str, Any] | None]:
    """The platform's normalization table (``expected.json``), empty if absent."""
    path = FIXTURES / platform / "expected.json"
    if not path.exists():
        return {}
    table: dict[str, dict[str, Any] | None] = json.loads(path.read_text(encoding="utf-8"))
    return table


def mismatches(inbound: Inbound, expect: dict[str, Any]) -> list[str]:
    """Fields of ``inbound`` that differ from ``expect`` (subset comparison)."""
    got = inbound.model_dump(mode="json")
    problems: list[str] = []
    for key, want in expect.items():
        if key not in got:
            problems.append(f"{key}: not an Inbound field")
        elif key == "attachments":
            have = got[key]
            if len(have) != len(want):
                problems.append(f"attachments: got {have!r}, want {want!r}")
                continue
            for i, (h, w) in enumerate(zip(have, want, strict=True)):
                for sub, value in w.items():
                    if h.get(sub) != value:
                        problems.append(f"attachments[{i}].{sub}: {h.get(sub)!r} != {value!r}")
        elif got[key] != want:
            problems.append(f"{key}: got {got[key]!r}, want {want!r}")
    return problems


_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def fences_balanced(text: str) -> bool:
    """Every Markdown code fence opened in ``text`` is closed in it."""
    open_marker: str | None = None
    for line in text.split("\n"):
        m = _FENCE.match(line)
        if not m:
            continue
        if open_marker is None:
            open_marker = m.group(1)
        elif (
            m.group(1)[0] == open_marker[0]
            and len(m.group(1)) >= len(open_marker)
            and not m.group(2).strip()
        ):
            open_marker = None
    return open_marker is None


_TAG = re.compile(r"<(/?)([a-zA-Z][a-zA-Z0-9-]*)(?:\s[^<>]*)?>")


def tags_balanced(html: str) -> bool:
    """Every HTML tag opened in ``html`` is closed in it, properly nested."""
    stack: list[str] = []
    for m in _TAG.finditer(html):
        closing, tag = m.group(1) == "/", m.group(2).lower()
        if tag == "br":
            continue
        if not closing:
            stack.append(tag)
        elif not stack or stack.pop() != tag:
            return False
    return not stack


_WORDS = re.compile(r"[A-Za-z0-9]+")
_FENCE_INFO = re.compile(r"^( {0,3}(?:`{3,}|~{3,}))[^\n]*$", re.MULTILINE)


def words(text: str) -> list[str]:
    """Alphanumeric words, for "nothing lost" checks across format conversion."""
    return _WORDS.findall(text)


def keeps_words(source: str, pieces: list[str]) -> bool:
    """Every word of ``source`` appears, in order, in the pieces (each piece is its own
    message, so words never join across pieces). Additions (a reopened fence's
    language, a link target) are allowed; losses are not. A fence's language tag is
    markup, not content, and may be dropped."""
    content = _FENCE_INFO.sub(r"\1", source)
    have = iter(w for piece in pieces for w in words(piece))
    return all(any(w == h for h in have) for w in words(content))


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = WAIT) -> None:
    """Poll an async predicate until it holds; fail (not hang) if it never does."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        if loop.time() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.02)
