"""The adapter contract: one suite every platform harness passes.

Parametrized over ``conftest.HARNESS_MODULES`` (see ``kit.py`` for how to join).
"""

from __future__ import annotations

import logging
import traceback

import pytest

from channels.errors import ChannelError, PermanentError, RateLimited, TransientError
from channels.models import Inbound
from tests.channels.kit import (
    AdapterHarness,
    HarnessSpec,
    SinkUnavailable,
    eventually,
    expected_table,
    keeps_words,
    mismatches,
)

pytestmark = pytest.mark.contract

LONG_MARKDOWN = "\n\n".join(
    [
        "# Plan for the week",
        "Here is **what** we agreed, with _care_ & some <angle> brackets and 1 < 2 > 0.",
        "- item one with `inline code`\n- item two 😀 with emoji\n- item three",
        "```python\n" + "".join(f"value_{i} = compute({i})  # {i}\n" for i in range(160)) + "```",
        " ".join(f"word{i}" for i in range(900)) + ".",
        "Closing thoughts. Short sentence. Another one here!",
    ]
)


def _flush_fixture(spec: HarnessSpec, harness: AdapterHarness) -> str:
    for name, expect in spec.cases():
        if expect is not None and name != harness.marker_fixture:
            return name
    pytest.skip(f"{spec.id}: needs two delivered fixtures in expected.json")


async def test_normalization_table(
    contract_spec: HarnessSpec,
    harness: AdapterHarness,
    norm_case: tuple[str, dict[str, object] | None],
) -> None:
    name, expect = norm_case
    await harness.inject(name)
    if expect is None:
        # deliberately dropped: deliver the marker after it; only the marker may arrive
        marker_expect = expected_table(contract_spec.platform).get(harness.marker_fixture)
        assert marker_expect, "the marker fixture needs an expectation that identifies it"
        await harness.inject(harness.marker_fixture)

        async def marker_arrived() -> bool:
            return any(not mismatches(i, marker_expect) for i in harness.sink.received)

        await eventually(marker_arrived)
        assert len(harness.sink.received) == 1, f"{name} should have been dropped"
        assert harness.sink.calls == 1
        return
    got = await harness.sink.wait_for(1)
    inbound = got[0]
    assert inbound.channel == harness.channel.name
    assert inbound.account == harness.channel.account
    assert mismatches(inbound, expect) == []
    # the envelope crosses Redis/RQ as JSON unchanged
    assert Inbound.model_validate(inbound.model_dump(mode="json")) == inbound


async def test_same_event_twice_has_one_dedupe_id(
    contract_spec: HarnessSpec, harness: AdapterHarness
) -> None:
    flush = _flush_fixture(contract_spec, harness)
    await harness.inject(harness.marker_fixture)
    [first] = await harness.sink.wait_for(1)
    await harness.inject(harness.marker_fixture)
    await harness.inject(flush)

    def same_message(inbound: Inbound) -> bool:
        return (inbound.chat_id, inbound.message_id) == (first.chat_id, first.message_id)

    async def flushed() -> bool:
        return any(not same_message(i) for i in harness.sink.received)

    await eventually(flushed)  # deliveries are in order: the duplicate had its turn
    markers = [i for i in harness.sink.received if same_message(i)]
    # the adapter may drop the redelivery itself or pass it on for the inbox to dedupe,
    # but it must never mint a second identity for one platform message
    assert 1 <= len(markers) <= 2
    assert {m.dedupe_id for m in markers} == {first.dedupe_id}
    others = [i for i in harness.sink.received if not same_message(i)]
    assert all(o.dedupe_id != first.dedupe_id for o in others)


async def test_cursor_moves_only_after_the_sink_returned(harness: AdapterHarness) -> None:
    harness.sink.failing = True
    await harness.inject(harness.marker_fixture)
    await harness.sink.wait_calls(1)
    assert harness.sink.received == []
    assert await harness.acked(harness.marker_fixture) is not True
    # still not acked after more failed attempts
    await harness.redeliver_pending()
    await harness.sink.wait_calls(2)
    assert await harness.acked(harness.marker_fixture) is not True

    harness.sink.failing = False
    await harness.redeliver_pending()
    got = await harness.sink.wait_for(1)
    assert len({i.dedupe_id for i in got}) == 1
    if await harness.acked(harness.marker_fixture) is not None:

        async def acked() -> bool:
            return await harness.acked(harness.marker_fixture) is True

        await eventually(acked)


def test_render_splits_within_the_limit_and_loses_nothing(harness: AdapterHarness) -> None:
    limits = harness.channel.limits
    chunks = harness.channel.render(LONG_MARKDOWN)
    assert len(chunks) >= 2, "the test text is longer than any platform limit"
    for chunk in chunks:
        assert 0 < limits.measure(chunk.text) <= limits.max_message_len
        assert 0 < limits.measure(chunk.plain) <= limits.max_message_len
        assert harness.chunk_well_formed(chunk), chunk.text[:200]
    assert keeps_words(LONG_MARKDOWN, [c.plain for c in chunks])
    # pure: a retried turn re-sends the same chunks
    assert harness.channel.render(LONG_MARKDOWN) == chunks


async def test_reply_reaches_the_fake_threaded_in_order(harness: AdapterHarness) -> None:
    out = harness.outbound(LONG_MARKDOWN)
    chunks = harness.channel.render(out.text)
    ids = [await harness.channel.send_chunk(out, chunk, i) for i, chunk in enumerate(chunks)]
    assert all(ids) and len(set(ids)) == len(ids)
    sent = harness.sent()
    assert [s.text for s in sent] == [c.text for c in chunks]
    for s in sent:
        assert s.chat_id == out.chat_id
        assert s.thread_id == out.thread_id
    if harness.quotes_replies:
        assert sent[0].reply_to_id == out.reply_to_id


async def test_429_raises_rate_limited_with_the_servers_retry_after(
    harness: AdapterHarness,
) -> None:
    out = harness.outbound("hello")
    chunk = harness.channel.render(out.text)[0]
    harness.fail_next_send(429, retry_after=7)
    with pytest.raises(RateLimited) as caught:
        await harness.channel.send_chunk(out, chunk, 0)
    assert caught.value.retry_after == pytest.approx(7, abs=1)
    assert harness.sent() == []
    # the outbox retries after waiting; the retry goes through once
    await harness.channel.send_chunk(out, chunk, 0)
    assert len(harness.sent()) == 1


async def test_permanent_error_has_a_reason_and_is_not_transient(
    harness: AdapterHarness,
) -> None:
    out = harness.outbound("hello")
    chunk = harness.channel.render(out.text)[0]
    harness.fail_next_send(403)
    with pytest.raises(PermanentError) as caught:
        await harness.channel.send_chunk(out, chunk, 0)
    assert caught.value.reason
    assert not isinstance(caught.value, TransientError)
    assert harness.sent() == []


async def test_server_error_is_transient_or_retried_once(harness: AdapterHarness) -> None:
    out = harness.outbound("hello")
    chunk = harness.channel.render(out.text)[0]
    harness.fail_next_send(500)
    try:
        await harness.channel.send_chunk(out, chunk, 0)
    except ChannelError as error:
        assert isinstance(error, TransientError), repr(error)
        assert harness.sent() == []
    else:  # an SDK that retries 5xx itself (discord.py) must still send exactly once
        assert len(harness.sent()) == 1


async def test_secrets_never_reach_logs_reprs_or_errors(
    harness: AdapterHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    texts: list[str] = [repr(harness.channel), str(harness.channel)]
    texts += [repr(v) for v in vars(harness.channel).values()]
    harness.sink.fail_next(1)
    await harness.inject(harness.marker_fixture)
    await harness.redeliver_pending()
    await harness.sink.wait_for(1)
    out = harness.outbound("hello")
    chunk = harness.channel.render(out.text)[0]
    for status in (429, 403, 500):
        harness.fail_next_send(status, retry_after=1)
        try:
            await harness.channel.send_chunk(out, chunk, 0)
        except ChannelError as error:
            texts.append("".join(traceback.format_exception(error)))
            texts.append(repr(error))
    texts.append(caplog.text)
    texts += [repr(r.args) for r in caplog.records]
    assert any(texts), "nothing was checked"
    for secret in harness.secrets:
        assert secret, "a harness secret is empty"
        for text in texts:
            assert secret not in text


def test_sink_unavailable_is_a_connection_error() -> None:
    # adapters may catch broad exceptions from the sink; the kit's failure must look
    # like what the Redis client raises when the server is gone
    assert issubclass(SinkUnavailable, ConnectionError)
