"""The contract of the shared receive loop (``channels.pull.PullLoop``), with a scripted
fetch as the only stand-in: the real loop, the recording sink and cursor store of the
contract kit."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from channels.base import InboundSink
from channels.errors import PermanentError, RateLimited
from channels.models import Inbound
from channels.pull import Batch, Item, PullLoop
from channels.retry import Backoff
from tests.channels.kit import WAIT, FlakyCursors, MemoryCursorStore, RecordingSink

KEY = "offset"
Step = Callable[[], Awaitable[Batch]]


def _inbound(n: int) -> Inbound:
    return Inbound(channel="test", chat_id="c", is_group=False, sender_id="u",
                   sender_name="U", message_id=str(n), text=f"message {n}")


class ScriptedFetch:
    """Plays ``steps`` in order (each returns a batch or raises), recording the cursor
    and the loop's failure count it was called with; then waits for ever."""

    def __init__(self, *steps: Step) -> None:
        self.steps = list(steps)
        self.calls: list[tuple[str | None, int]] = []
        self.loop: PullLoop | None = None
        self.done = asyncio.Event()

    async def __call__(self, cursor: str | None) -> Batch:
        assert self.loop is not None
        self.calls.append((cursor, self.loop.failures))
        if not self.steps:
            self.done.set()
            await asyncio.Event().wait()
        return await self.steps.pop(0)()


def returns(batch: Batch) -> Step:
    async def step() -> Batch:
        return batch
    return step


def raises(error: Exception) -> Step:
    async def step() -> Batch:
        raise error
    return step


def hangs() -> Step:
    async def step() -> Batch:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")
    return step


def _loop(fetch: ScriptedFetch, sink: InboundSink,
          cursors: MemoryCursorStore, *, stall_after: float | None = None) -> PullLoop:
    loop = PullLoop(fetch, sink, cursors, KEY,
                    backoff=Backoff(0.001, 0.005), stall_after=stall_after,
                    log=logging.getLogger("tests.pull"), name="test")
    fetch.loop = loop
    return loop


async def _run_until_fetched_out(loop: PullLoop, fetch: ScriptedFetch) -> None:
    task = asyncio.create_task(loop.run())
    try:
        await asyncio.wait_for(fetch.done.wait(), WAIT)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


async def test_a_cursor_is_committed_only_after_the_sink_returned_for_all_before_it() -> None:
    cursors = MemoryCursorStore()
    await cursors.set(KEY, "10")
    seen: list[tuple[str, str | None]] = []

    async def sink(inbound: Inbound) -> None:
        # what the store holds while the sink works on this message
        seen.append((inbound.message_id, await cursors.get(KEY)))

    fetch = ScriptedFetch(
        returns(Batch([Item(_inbound(10), "11"), Item(None, "12"), Item(_inbound(12), "13")])),
        returns(Batch([Item(_inbound(20)), Item(_inbound(21))], cursor="s2")),
    )
    loop = _loop(fetch, sink, cursors)
    await _run_until_fetched_out(loop, fetch)
    # per-item cursors move item by item; a batch cursor only after its last item
    assert seen == [("10", "10"), ("12", "12"), ("20", "13"), ("21", "13")]
    assert [c for c, _ in fetch.calls] == ["10", "13", "s2"]
    assert cursors.writes[1:] == [(KEY, "11"), (KEY, "12"), (KEY, "13"), (KEY, "s2")]
    assert loop.ready.is_set()


async def test_a_sink_failure_hands_the_same_message_again_and_holds_the_cursor() -> None:
    cursors = MemoryCursorStore()
    sink = RecordingSink()
    sink.fail_next(3)
    stored_at_call: list[str | None] = []

    async def watched(inbound: Inbound) -> None:
        stored_at_call.append(await cursors.get(KEY))
        await sink(inbound)

    fetch = ScriptedFetch(returns(Batch([Item(_inbound(1)), Item(_inbound(2))], cursor="s1")))
    loop = _loop(fetch, watched, cursors)
    await _run_until_fetched_out(loop, fetch)
    assert sink.calls == 5  # message 1 four times (three refused), then message 2
    assert [i.message_id for i in sink.received] == ["1", "2"]
    assert stored_at_call == [None] * 5  # never moved while message 1 was refused
    assert cursors.writes == [(KEY, "s1")]
    assert fetch.calls == [(None, 0), ("s1", 0)]  # held, not re-fetched; backoff reset


async def test_fetch_failures_back_off_and_fetch_again_from_the_same_cursor() -> None:
    cursors = MemoryCursorStore()
    await cursors.set(KEY, "5")
    sink = RecordingSink()
    fetch = ScriptedFetch(raises(OSError("reset")), raises(ConnectionError("refused")),
                          returns(Batch([Item(_inbound(5), "6")])))
    loop = _loop(fetch, sink, cursors)
    await _run_until_fetched_out(loop, fetch)
    # each retry came after one more backoff step; a success starts over
    assert fetch.calls == [("5", 0), ("5", 1), ("5", 2), ("6", 0)]
    assert [i.message_id for i in sink.received] == ["5"]


async def test_rate_limit_waits_as_asked_without_counting_a_failure() -> None:
    cursors = MemoryCursorStore()
    fetch = ScriptedFetch(raises(RateLimited(0.01)), returns(Batch(cursor="a")))
    loop = _loop(fetch, RecordingSink(), cursors)
    await _run_until_fetched_out(loop, fetch)
    assert fetch.calls == [(None, 0), (None, 0), ("a", 0)]


async def test_a_refused_token_stops_the_loop() -> None:
    fetch = ScriptedFetch(raises(PermanentError("unauthorized", "token refused")))
    loop = _loop(fetch, RecordingSink(), MemoryCursorStore())
    await asyncio.wait_for(loop.run(), WAIT)  # returns: it does not fetch again
    assert loop.fatal == "unauthorized"
    assert len(fetch.calls) == 1


async def test_a_stalled_fetch_is_cancelled_and_fetched_again() -> None:
    cursors = MemoryCursorStore()
    await cursors.set(KEY, "7")
    sink = RecordingSink()
    fetch = ScriptedFetch(hangs(), returns(Batch([Item(_inbound(7), "8")])))
    loop = _loop(fetch, sink, cursors, stall_after=0.05)
    await _run_until_fetched_out(loop, fetch)
    assert loop.stalls >= 1
    assert fetch.calls[:2] == [("7", 0), ("7", 0)]
    assert [i.message_id for i in sink.received] == ["7"]


async def test_the_stored_cursor_is_waited_for_rather_than_fetching_without_it() -> None:
    cursors = FlakyCursors(failures=2)
    await cursors.set(KEY, "42")
    fetch = ScriptedFetch()
    loop = _loop(fetch, RecordingSink(), cursors)
    await _run_until_fetched_out(loop, fetch)
    assert fetch.calls == [("42", 0)]
    assert cursors.failures == 0


async def test_a_cancel_swallowed_inside_a_fetch_still_stops_the_loop() -> None:
    """Python 3.11's ``asyncio.wait_for`` inside a client library can swallow a cancel
    that lands as its inner future completes; the fetch then returns normally with the
    task still cancelling. The loop must stop at its next turn, not fetch (and wait in a
    long poll) for ever."""
    fetched = asyncio.Event()
    swallowed: list[bool] = []

    async def swallowing(cursor: str | None) -> Batch:
        fetched.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            if swallowed:
                raise
            swallowed.append(True)  # what the library bug does, once
        return Batch()

    loop = PullLoop(swallowing, RecordingSink(), None, KEY, backoff=Backoff(0.01, 0.05),
                    stall_after=None, log=logging.getLogger("test"), name="test")
    task = asyncio.create_task(loop.run())
    await asyncio.wait_for(fetched.wait(), WAIT)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, WAIT)
