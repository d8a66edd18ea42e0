"""Telegram-specific behaviour beyond the shared contract: the real python-telegram-bot
against the local fake Bot API (tests/fakes/telegram_api.py)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from pydantic import ValidationError

from channels.base import Chunk
from channels.errors import PermanentError, RateLimited
from channels.models import Outbound
from channels.telegram import TelegramChannel
from channels.telegram.poller import OFFSET_KEY
from channels.telegram.webhook import SECRET_HEADER
from tests.channels.harness_telegram import (
    FORUM_ID,
    TOPIC_ID,
    TRIGGER_ID,
    WEBHOOK_SECRET,
    TelegramHarness,
    block,
    env,
    new_fake,
    telegram_harness,
)
from tests.channels.kit import (
    FlakyCursors,
    MemoryCursorStore,
    RecordingSink,
    eventually,
    load_fixture,
)
from tests.fakes.telegram_api import BOT_TOKEN, ApiFailure, FakeTelegram, parse_html


@pytest.fixture
async def polling() -> AsyncIterator[TelegramHarness]:
    async with telegram_harness("polling") as harness:
        yield harness


@pytest.fixture
async def webhook() -> AsyncIterator[TelegramHarness]:
    async with telegram_harness("webhook") as harness:
        yield harness


def webhook_url(harness: TelegramHarness) -> str:
    assert harness.fake.webhook is not None
    url: str = harness.fake.webhook["url"]
    return url


# ---------------------------------------------------------------- inbound, polling


async def test_group_mention_reaches_the_sink_normalized(polling: TelegramHarness) -> None:
    await polling.inject("group_mention")
    [inbound] = await polling.sink.wait_for(1)
    assert inbound.channel == "telegram"
    assert inbound.group == "telegram:-1001234567890"
    assert inbound.mentions_bot is True
    assert inbound.sender_name == "Alice Liddell"
    assert inbound.raw["message"]["message_id"] == 501


async def test_offset_is_persisted_after_each_delivered_update(polling: TelegramHarness) -> None:
    await polling.inject("group_plain")
    first = polling.update_ids["group_plain"]
    await polling.sink.wait_for(1)

    async def persisted() -> bool:
        return await polling.cursors.get(OFFSET_KEY) == str(first + 1)

    await eventually(persisted)
    # dropped updates move the cursor too, or Telegram would resend them forever
    await polling.inject("new_members")
    edited = polling.update_ids["new_members"]

    async def moved() -> bool:
        return await polling.cursors.get(OFFSET_KEY) == str(edited + 1)

    await eventually(moved)
    assert len(polling.sink.received) == 1


async def test_offset_not_advanced_while_the_sink_raises(polling: TelegramHarness) -> None:
    await polling.inject("group_plain")
    await polling.sink.wait_for(1)
    polling.sink.failing = True
    await polling.inject("group_mention")
    failing_id = polling.update_ids["group_mention"]
    await polling.sink.wait_calls(3)  # retried from the same offset, several times
    assert await polling.cursors.get(OFFSET_KEY) == str(failing_id)
    assert polling.fake.pending[0]["update_id"] == failing_id  # not confirmed at Telegram
    polling.sink.failing = False
    got = await polling.sink.wait_for(2)
    assert [i.message_id for i in got] == ["502", "501"]


async def test_restart_neither_loses_nor_replays() -> None:
    fake = new_fake()
    await fake.start()
    cursors = MemoryCursorStore()
    try:
        first_sink = RecordingSink()
        channel = TelegramChannel.from_config("default", block(fake), env())
        channel.bind(cursors)
        await channel.start(first_sink)
        await fake.enqueue(load_fixture("telegram", "group_plain"))
        await first_sink.wait_for(1)

        async def persisted() -> bool:
            return await cursors.get(OFFSET_KEY) is not None

        await eventually(persisted)
        # an update that the inbox could not take when the process went down
        first_sink.failing = True
        await fake.enqueue(load_fixture("telegram", "group_mention"))
        await first_sink.wait_calls(2)
        await channel.stop()

        second_sink = RecordingSink()
        restarted = TelegramChannel.from_config("default", block(fake), env())
        restarted.bind(cursors)
        await restarted.start(second_sink)
        await fake.enqueue(load_fixture("telegram", "private_text"))
        got = await second_sink.wait_for(2)
        await restarted.stop()
        # the failed one comes back, the delivered one does not
        assert [i.message_id for i in got] == ["501", "41"]
    finally:
        await fake.stop()


async def test_malformed_update_is_skipped_and_the_rest_delivered(
    polling: TelegramHarness, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="channels.telegram.poller")
    # a date that is not a timestamp breaks python-telegram-bot's parse of the whole batch
    broken = load_fixture("telegram", "group_plain")
    broken["message"]["date"] = "yesterday"
    bad_id = await polling.fake.enqueue(broken)
    await polling.inject("private_text")
    [inbound] = await polling.sink.wait_for(1)
    assert inbound.message_id == "41"

    async def past_both() -> bool:
        stored = await polling.cursors.get(OFFSET_KEY)
        return stored is not None and int(stored) > polling.update_ids["private_text"]

    await eventually(past_both)
    assert any(f"malformed update {bad_id} skipped" in r.getMessage() for r in caplog.records)


async def test_start_waits_for_the_cursor_store_instead_of_replaying() -> None:
    fake = new_fake()
    await fake.start()
    cursors = FlakyCursors(failures=3)
    await cursors.set(OFFSET_KEY, "100001")  # the next update the fake will number
    channel = TelegramChannel.from_config("default", block(fake), env())
    channel.bind(cursors)
    sink = RecordingSink()
    try:
        await channel.start(sink)
        await fake.enqueue(load_fixture("telegram", "private_text"))
        await sink.wait_for(1)
        assert cursors.failures == 0
        offsets = [c[1].get("offset") for c in fake.calls if c[0] == "getUpdates"]
        assert offsets[0] == 100001  # the first poll already used the stored offset
    finally:
        await channel.stop()
        await fake.stop()


async def test_watchdog_restarts_a_stalled_poll(polling: TelegramHarness) -> None:
    polling.fake.stall_polls = 1
    assert polling.channel.poller is not None

    async def stalled_and_recovered() -> bool:
        assert polling.channel.poller is not None
        return polling.fake.stalled == 1 and polling.channel.poller.stalls >= 1

    await eventually(stalled_and_recovered)
    await polling.inject("private_text")
    [inbound] = await polling.sink.wait_for(1)
    assert inbound.message_id == "41"


async def test_poll_errors_back_off_and_recover(polling: TelegramHarness) -> None:
    for _ in range(3):
        polling.fake.fail_next("getUpdates", ApiFailure(502, "Bad Gateway"))
    await polling.inject("private_text")
    await polling.sink.wait_for(1)
    poller = polling.channel.poller
    assert poller is not None
    assert poller.failures == 0  # reset by the successful poll
    errors = [c for c in polling.fake.calls if c[0] == "getUpdates"]
    assert len(errors) >= 4


async def test_poll_429_waits_the_servers_retry_after(polling: TelegramHarness) -> None:
    polling.fake.fail_next(
        "getUpdates", ApiFailure(429, "Too Many Requests: retry after 1", {"retry_after": 1})
    )
    await polling.inject("private_text")
    await polling.sink.wait_for(1)
    assert not polling.fake.failures["getUpdates"]


async def test_polling_start_removes_a_webhook_left_from_webhook_mode() -> None:
    fake = new_fake()
    await fake.start()
    fake.webhook = {"url": "https://example.invalid/hook", "secret_token": None}
    channel = TelegramChannel.from_config("default", block(fake), env())
    sink = RecordingSink()
    try:
        await channel.start(sink)
        await fake.enqueue(load_fixture("telegram", "private_text"))
        await sink.wait_for(1)
        assert fake.webhook is None
    finally:
        await channel.stop()
        await fake.stop()


async def test_refused_token_at_start_is_permanent_and_does_not_leak() -> None:
    fake = FakeTelegram(token="123:other-token-the-fake-expects")
    await fake.start()
    channel = TelegramChannel.from_config("default", block(fake), env())
    try:
        with pytest.raises(PermanentError) as caught:
            await channel.start(RecordingSink())
        assert caught.value.reason == "invalid_token"
        assert BOT_TOKEN not in str(caught.value)
    finally:
        await channel.stop()
        await fake.stop()


# ---------------------------------------------------------------- webhook


async def test_webhook_is_registered_with_secret_and_allowed_updates(
    webhook: TelegramHarness,
) -> None:
    hook = webhook.fake.webhook
    assert hook is not None
    assert hook["secret_token"] == WEBHOOK_SECRET
    assert "message" in hook["allowed_updates"]
    assert hook["max_connections"] == 1  # sequential delivery keeps per-chat order


async def test_webhook_delivers_and_answers_200(webhook: TelegramHarness) -> None:
    _, status = await webhook.fake.deliver_webhook(load_fixture("telegram", "forum_topic"))
    assert status == 200
    [inbound] = webhook.sink.received  # durable before the 200
    assert inbound.thread_id == "77"


@pytest.mark.parametrize(
    "headers",
    [{}, {SECRET_HEADER: "wrong"}, {SECRET_HEADER: WEBHOOK_SECRET + "x"}, {SECRET_HEADER: ""}],
    ids=["missing", "wrong", "longer", "empty"],
)
async def test_webhook_forged_secret_is_401_and_never_reaches_the_sink(
    webhook: TelegramHarness, headers: dict[str, str]
) -> None:
    body = json.dumps(
        {
            "update_id": 1,
            **{
                k: v
                for k, v in load_fixture("telegram", "group_mention").items()
                if k != "update_id"
            },
        }
    )
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            webhook_url(webhook), data=body, headers={"Content-Type": "application/json", **headers}
        ) as response,
    ):
        assert response.status == 401
    assert webhook.sink.calls == 0


@pytest.mark.parametrize(
    "body",
    [b"{not json", b"[1, 2]", b'{"no_update_id": true}', b'{"update_id": "7"}', b""],
    ids=["syntax", "array", "no-update-id", "string-id", "empty"],
)
async def test_webhook_malformed_body_is_400_with_a_log_line(
    webhook: TelegramHarness, body: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="channels.telegram.webhook")
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            webhook_url(webhook), data=body, headers={SECRET_HEADER: WEBHOOK_SECRET}
        ) as response,
    ):
        assert response.status == 400
    assert webhook.sink.calls == 0
    assert any("malformed update" in r.getMessage() for r in caplog.records)


async def test_webhook_answers_503_when_the_sink_raises(webhook: TelegramHarness) -> None:
    webhook.sink.failing = True
    _, status = await webhook.fake.deliver_webhook(load_fixture("telegram", "group_mention"))
    assert status == 503
    webhook.sink.failing = False
    await webhook.fake.redeliver_failed()
    assert [i.message_id for i in webhook.sink.received] == ["501"]


async def test_webhook_route_is_inert_until_started() -> None:
    fake = new_fake()
    await fake.start()
    channel = TelegramChannel.from_config("default", block(fake, mode="webhook"), env())
    app = web.Application()
    app.add_routes(channel.web_routes())
    client = TestClient(TestServer(app))
    await client.start_server()
    try:
        response = await client.post(
            "/telegram/webhook",
            data=json.dumps(load_fixture("telegram", "group_mention")),
            headers={SECRET_HEADER: WEBHOOK_SECRET},
        )
        assert response.status == 503
    finally:
        await client.close()
        await fake.stop()


# ---------------------------------------------------------------- outbound


async def test_reply_is_html_threaded_and_split(polling: TelegramHarness) -> None:
    text = "**Summary** for <team> & co:\n\n" + "\n\n".join(
        f"Paragraph {i}: " + "lorem ipsum dolor sit amet " * 12 for i in range(30)
    )
    out = polling.outbound(text)
    chunks = polling.channel.render(text)
    assert len(chunks) >= 2
    for i, chunk in enumerate(chunks):
        await polling.channel.send_chunk(out, chunk, i)
    sent = polling.fake.sent
    assert len(sent) == len(chunks)
    assert all(s["parse_mode"] == "HTML" for s in sent)
    assert all(s["message_thread_id"] == TOPIC_ID for s in sent)
    assert all(s["chat_id"] == FORUM_ID for s in sent)
    # only the first chunk quotes the triggering message
    assert sent[0]["reply_parameters"]["message_id"] == TRIGGER_ID
    assert all("reply_parameters" not in s for s in sent[1:])
    assert sent[0]["text"].startswith("<b>Summary</b> for &lt;team&gt; &amp; co:")


async def test_formatting_rejected_falls_back_to_plain_text(polling: TelegramHarness) -> None:
    polling.fake.fail_next(
        "sendMessage",
        ApiFailure(
            400, 'Bad Request: can\'t parse entities: Unsupported start tag "x" at byte offset 0'
        ),
    )
    out = polling.outbound("**bold** claim")
    [chunk] = polling.channel.render(out.text)
    message_id = await polling.channel.send_chunk(out, chunk, 0)
    assert message_id
    [sent] = polling.fake.sent
    assert "parse_mode" not in sent
    assert sent["text"] == "bold claim" == chunk.plain


async def test_blocked_by_user_is_permanent_with_its_reason(polling: TelegramHarness) -> None:
    polling.fake.blocked_chats.add(111222333)
    out = Outbound(channel="telegram", chat_id="111222333", text="hi", reply_id="r")
    [chunk] = polling.channel.render("hi")
    with pytest.raises(PermanentError) as caught:
        await polling.channel.send_chunk(out, chunk, 0)
    assert caught.value.reason == "blocked_by_user"


async def test_429_on_send_carries_retry_after(polling: TelegramHarness) -> None:
    polling.fail_next_send(429, retry_after=31)
    out = polling.outbound("hi")
    with pytest.raises(RateLimited) as caught:
        await polling.channel.send_chunk(out, Chunk(text="hi", plain="hi"), 0)
    assert caught.value.retry_after == 31


async def test_typing_goes_to_the_topic(polling: TelegramHarness) -> None:
    await polling.channel.typing(str(FORUM_ID), str(TOPIC_ID))
    [action] = polling.fake.actions
    assert action["action"] == "typing"
    assert action["message_thread_id"] == TOPIC_ID


async def test_typing_failure_is_swallowed(polling: TelegramHarness) -> None:
    polling.fake.blocked_chats.add(5)
    await polling.channel.typing("5")
    assert polling.fake.actions == []


# ---------------------------------------------------------------- config & secrets


def test_missing_token_names_the_variable() -> None:
    with pytest.raises(ValueError, match="TELEGRAM_BOT_TOKEN"):
        TelegramChannel.from_config("default", {}, {})
    with pytest.raises(ValueError, match="MY_TG"):
        TelegramChannel.from_config("default", {"token_env": "MY_TG"}, {})


def test_unknown_key_is_rejected() -> None:
    with pytest.raises(ValidationError, match="tokn_env"):
        TelegramChannel.from_config("default", {"tokn_env": "X"}, env())


@pytest.mark.parametrize("secret", ["", "has spaces", "x" * 257, "semi;colon"])
def test_webhook_mode_needs_a_valid_secret(secret: str) -> None:
    with pytest.raises(ValueError, match="TELEGRAM_WEBHOOK_SECRET"):
        TelegramChannel.from_config(
            "default",
            {"mode": "webhook"},
            {"TELEGRAM_BOT_TOKEN": BOT_TOKEN, "TELEGRAM_WEBHOOK_SECRET": secret},
        )


def test_bot_construction_log_line_is_redacted(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    channel = TelegramChannel.from_config("default", {"base_url": "http://127.0.0.1:9/bot"}, env())
    assert "Set Bot API URL" in caplog.text  # PTB's line that carries the token
    assert BOT_TOKEN not in caplog.text
    assert "***" in caplog.text
    assert BOT_TOKEN not in repr(channel)
    assert all(BOT_TOKEN not in repr(v) for v in vars(channel).values())


def test_every_rendered_chunk_is_valid_telegram_html() -> None:
    channel = TelegramChannel.from_config("default", {}, env())
    weird = 'a < b && c > d <script>x</script> [l](https://e.com/?q=<1>&r="2") `<code>` *x* **y**'
    code = "```html\n" + '<div class="x">&amp;</div>\n' * 400 + "```"
    for text in (weird, code, weird * 200):
        chunks = channel.render(text)
        assert chunks
        for chunk in chunks:
            problem, visible = parse_html(chunk.text)
            assert problem is None, problem
            assert visible.strip()
