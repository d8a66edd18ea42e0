"""Replies through render/send_chunk at the fake: threads, mrkdwn, chunks, errors."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from channels.base import Chunk
from channels.errors import NetworkError, PermanentError, RateLimited, TransientError
from channels.models import Outbound
from channels.slack import SlackChannel
from channels.slack.render import SLACK_SECTION_LIMIT
from tests.fakes.slack_api import (
    APP_TOKEN,
    BOT_TOKEN,
    SIGNING_SECRET,
    Failure,
    FakeSlack,
    channel_block,
    channel_env,
)

SECRETS = (BOT_TOKEN, APP_TOKEN, SIGNING_SECRET)


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    server = FakeSlack()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def channel(fake: FakeSlack) -> SlackChannel:
    return SlackChannel.from_config("default", channel_block(fake, "http"), channel_env())


def reply(text: str, **kw: str | None) -> Outbound:
    fields: dict[str, str | None] = {"chat_id": "C0GENERAL1", "reply_to_id": "1700000000.000100",
                                     "reply_id": "r1"}
    fields.update(kw)
    return Outbound(channel="slack", text=text, **fields)  # type: ignore[arg-type]


async def send_all(channel: SlackChannel, message: Outbound) -> list[str]:
    return [await channel.send_chunk(message, chunk, i)
            for i, chunk in enumerate(channel.render(message.text))]


async def test_reply_goes_to_the_thread_of_the_trigger_as_mrkdwn(
    fake: FakeSlack, channel: SlackChannel
) -> None:
    ids = await send_all(channel, reply("**Done** — see [the doc](https://example.com/a?b=1&c=2)"))
    assert len(fake.posted) == 1 and ids == [fake.posted[0]["ts"]]
    post = fake.posted[0]
    assert post["channel"] == "C0GENERAL1"
    assert post["thread_ts"] == "1700000000.000100"
    block = post["blocks"][0]
    assert block["type"] == "section" and block["text"]["type"] == "mrkdwn"
    assert block["text"]["text"] == "*Done* — see <https://example.com/a?b=1&c=2|the doc>"
    # the notification text is the plain fallback
    assert post["text"].startswith("**Done**")


async def test_reply_inside_a_thread_stays_in_that_thread(
    fake: FakeSlack, channel: SlackChannel
) -> None:
    await send_all(channel, reply("ok", thread_id="1699999999.000001",
                                  reply_to_id="1700000000.000100"))
    assert fake.posted[0]["thread_ts"] == "1699999999.000001"


async def test_dm_replies_inline_unless_already_threaded(
    fake: FakeSlack, channel: SlackChannel
) -> None:
    await send_all(channel, reply("ok", chat_id="D0ALICEDM1"))
    await send_all(channel, reply("ok", chat_id="D0ALICEDM1", thread_id="1699999999.000001"))
    assert "thread_ts" not in fake.posted[0]
    assert fake.posted[1]["thread_ts"] == "1699999999.000001"


async def test_reply_in_thread_can_be_turned_off(fake: FakeSlack) -> None:
    channel = SlackChannel.from_config(
        "default", channel_block(fake, "http", reply_in_thread=False), channel_env()
    )
    await send_all(channel, reply("ok"))
    assert "thread_ts" not in fake.posted[0]


async def test_long_reply_arrives_in_ordered_chunks_within_the_limit(
    fake: FakeSlack, channel: SlackChannel
) -> None:
    paragraphs = [f"Paragraph {i}: " + "word " * 150 for i in range(12)]
    code = "```python\n" + "\n".join(f"x{i} = {i}  # <&>" for i in range(300)) + "\n```"
    text = "\n\n".join(paragraphs) + "\n\n" + code
    ids = await send_all(channel, reply(text))
    assert len(fake.posted) >= 3 and len(set(ids)) == len(ids)
    bodies = [p["blocks"][0]["text"]["text"] for p in fake.posted]
    assert all(len(b) <= SLACK_SECTION_LIMIT for b in bodies)
    assert all(p["thread_ts"] == "1700000000.000100" for p in fake.posted)
    joined = "\n".join(bodies)
    for i in range(12):
        assert f"Paragraph {i}:" in joined
    assert joined.index("Paragraph 0:") < joined.index("Paragraph 11:")
    # every chunk's code fences are balanced and code is escaped for Slack
    assert all(b.count("```") % 2 == 0 for b in bodies)
    assert "x299 = 299  # &lt;&amp;&gt;" in joined


async def test_rejected_blocks_fall_back_to_plain_text(
    fake: FakeSlack, channel: SlackChannel
) -> None:
    fake.fail_next("chat.postMessage", Failure(error="invalid_blocks"))
    ts = await channel.send_chunk(reply("x"), Chunk(text="*x*", plain="**x** <y> & z"), 0)
    assert len(fake.posted) == 1
    post = fake.posted[0]
    assert ts == post["ts"]
    assert "blocks" not in post
    # plain text still escapes Slack's three control characters
    assert post["text"] == "**x** &lt;y&gt; &amp; z" and post["mrkdwn"] is False


async def test_429_maps_to_rate_limited_with_retry_after(
    fake: FakeSlack, channel: SlackChannel
) -> None:
    fake.fail_next("chat.postMessage", Failure(status=429, retry_after=7))
    with pytest.raises(RateLimited) as info:
        await channel.send_chunk(reply("x"), Chunk(text="x", plain="x"), 0)
    assert info.value.retry_after == 7.0
    assert fake.posted == []  # never retried behind the outbox's back


@pytest.mark.parametrize(
    "code",
    ["not_in_channel", "channel_not_found", "is_archived", "account_inactive", "invalid_auth",
     "some_future_error"],
)
async def test_permanent_errors_carry_the_reason(
    fake: FakeSlack, channel: SlackChannel, code: str
) -> None:
    fake.fail_next("chat.postMessage", Failure(error=code))
    with pytest.raises(PermanentError) as info:
        await channel.send_chunk(reply("x"), Chunk(text="x", plain="x"), 0)
    assert info.value.reason == code
    assert len([c for c in fake.calls if c[0] == "chat.postMessage"]) == 1


async def test_server_errors_are_transient(fake: FakeSlack, channel: SlackChannel) -> None:
    fake.fail_next("chat.postMessage", Failure(status=503, error="service_unavailable"))
    with pytest.raises(TransientError) as info:
        await channel.send_chunk(reply("x"), Chunk(text="x", plain="x"), 0)
    assert not isinstance(info.value, PermanentError)


async def test_unreachable_slack_is_network_error(fake: FakeSlack) -> None:
    await fake.stop()  # the port is closed now
    channel = SlackChannel.from_config("default", channel_block(fake, "http"), channel_env())
    with pytest.raises(NetworkError):
        await channel.send_chunk(reply("x"), Chunk(text="x", plain="x"), 0)


async def test_secrets_never_in_reprs_errors_or_logs(
    fake: FakeSlack, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    channel = SlackChannel.from_config("default", channel_block(fake, "http"), channel_env())
    texts = [repr(channel), str(channel), repr(channel.settings), repr(channel._secrets),
             repr(channel.web_routes())]
    await channel.start(lambda inbound: _noop())
    for failure in (Failure(error="invalid_auth"), Failure(status=429, retry_after=1)):
        fake.fail_next("chat.postMessage", failure)
        try:
            await channel.send_chunk(reply("x"), Chunk(text="x", plain="x"), 0)
        except Exception as exc:
            texts += [str(exc), repr(exc)]
    bad = SlackChannel.from_config(
        "default", channel_block(fake, "http"), dict(channel_env(), SLACK_BOT_TOKEN="xoxb-bad-1")
    )
    with pytest.raises(PermanentError) as info:
        await bad.start(lambda inbound: _noop())
    texts += [str(info.value), repr(info.value)]
    texts += [r.getMessage() for r in caplog.records]
    blob = "\n".join(texts)
    for secret in (*SECRETS, "xoxb-bad-1"):
        assert secret not in blob
    # the SDK's request debug logs (with their headers) were captured and checked
    assert any("Sending a request" in r.getMessage() for r in caplog.records)


async def _noop() -> None:
    return None


def test_missing_token_names_the_variable() -> None:
    with pytest.raises(ValueError, match="SLACK_BOT_TOKEN"):
        SlackChannel.from_config("default", {"mode": "http"}, {"SLACK_SIGNING_SECRET": "s"})
    with pytest.raises(ValueError, match="SLACK_APP_TOKEN"):
        SlackChannel.from_config("default", {"mode": "socket"}, {"SLACK_BOT_TOKEN": "xoxb-1"})
    with pytest.raises(ValueError, match="MY_SECRET"):
        SlackChannel.from_config(
            "default", {"mode": "http", "signing_secret_env": "MY_SECRET"},
            {"SLACK_BOT_TOKEN": "xoxb-1"},
        )


def test_named_account_gets_its_own_webhook_path() -> None:
    env = channel_env()
    assert SlackChannel.from_config("default", {"mode": "http"}, env).webhook_path == (
        "/slack/events"
    )
    work = SlackChannel.from_config("work", {"mode": "http"}, env)
    assert work.webhook_path == "/slack/work/events"
    assert [route.path for route in work.web_routes()] == ["/slack/work/events"]  # type: ignore[attr-defined]
    socket = SlackChannel.from_config("default", {"mode": "socket"}, env)
    assert socket.web_routes() == []


def test_unknown_config_key_is_named() -> None:
    with pytest.raises(ValueError, match="bot_tokne_env"):
        SlackChannel.from_config("default", {"bot_tokne_env": "X"}, channel_env())


async def test_typing_is_a_documented_no_op(fake: FakeSlack, channel: SlackChannel) -> None:
    await channel.typing("C0GENERAL1", None)
    assert fake.calls == []
