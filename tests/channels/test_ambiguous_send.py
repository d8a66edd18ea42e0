"""An ambiguous send (the platform accepted the request, then the connection dropped
before its answer) through the real outbox, real Valkey and each platform's real SDK
against its fake: delivered once where the platform dedupes or can be asked, re-sent
once and counted where it cannot (issue 30)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiosmtplib
import httpx
import pytest
import redis.asyncio as aioredis
from telegram import error as tg

from channels.base import Channel
from channels.email.smtp import map_smtp_error
from channels.errors import MaybeSent, TransientError
from channels.models import Outbound
from channels.signal.normalize import GROUP_PREFIX
from channels.slack import SlackChannel
from channels.telegram.errors import map_error as telegram_map_error
from gateway.outgoing import Outbox
from gateway.queue import Keys
from tests.channels.harness_discord import DiscordRig
from tests.channels.harness_matrix import GROUP as MATRIX_ROOM
from tests.channels.harness_matrix import matrix_harness
from tests.channels.harness_signal import GROUP_ID as SIGNAL_GROUP
from tests.channels.harness_signal import signal_harness
from tests.channels.harness_telegram import GROUP_ID, telegram_harness
from tests.channels.harness_whatsapp import ALICE
from tests.channels.harness_whatsapp import started as whatsapp_started
from tests.channels.kit import eventually
from tests.fakes.slack_api import FakeSlack, channel_block, channel_env
from tests.pipeline.conftest import Valkey

K = Keys()


@pytest.fixture
def valkey(tmp_path: Path) -> Iterator[Valkey]:
    v = Valkey(tmp_path / "redis")
    v.start()
    yield v
    v.stop()


@pytest.fixture
async def r(valkey: Valkey) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(valkey.url)
    yield client
    await client.aclose()


def outbox_for(r: aioredis.Redis, channel: Channel) -> Outbox:
    # no backoff worth waiting for: the retry after the drop is what is under test
    ob = Outbox(r, {(channel.name, channel.account): channel}, K, consumer="gw-a",
                block_ms=100)
    return ob


def reply(channel: str, chat_id: str, text: str, reply_id: str) -> dict[str, str]:
    out = Outbound(channel=channel, chat_id=chat_id, text=text, reply_id=reply_id)
    return {"type": "reply", "data": out.model_dump_json()}


async def test_discord_dedupes_the_resend_by_its_nonce(r: aioredis.Redis) -> None:
    async with DiscordRig() as rig:
        assert rig.channel is not None
        ob = outbox_for(r, rig.channel)
        rig.fake.drop_after_accept = 1
        assert await ob.handle(reply("discord", rig.general["id"], "hello", "rd-1")) is True
        [sent] = rig.fake.sent  # the re-send returned the first message, no second one
        assert ob.stats.ambiguous == 1 and ob.stats.sent == 1
        assert await ob.outcomes.outcome("rd-1") == {0: ("delivered", sent["id"])}
        assert (await ob.outcomes.counts())["discord:ambiguous"] == 1
        # a second chunk index, or another reply, is a different nonce: sent anew
        assert await ob.handle(reply("discord", rig.general["id"], "hello", "rd-2")) is True
        assert len(rig.fake.sent) == 2


async def test_telegram_resends_once_and_counts_it(r: aioredis.Redis) -> None:
    # the Bot API has no idempotency key and no lookup: at least once, counted
    async with telegram_harness() as h:
        ob = outbox_for(r, h.channel)
        h.fake.drop_after_accept("sendMessage")
        assert await ob.handle(reply("telegram", str(GROUP_ID), "hello", "rt-1")) is True
        texts = [m["text"] for m in h.fake.sent]
        assert texts == ["hello", "hello"]  # the honest duplicate the README admits
        assert ob.stats.ambiguous == 1 and ob.stats.sent == 1
        assert (await ob.outcomes.counts())["telegram:ambiguous"] == 1


async def test_telegram_answered_after_the_read_timeout_resends_once(
    r: aioredis.Redis
) -> None:
    async with telegram_harness() as h:
        ob = outbox_for(r, h.channel)
        # sent at once, answered after PTB's 5 s read timeout for sendMessage
        h.fake.answer_late("sendMessage", 5.5)
        assert await ob.handle(reply("telegram", str(GROUP_ID), "hello", "rt-2")) is True
        assert [m["text"] for m in h.fake.sent] == ["hello", "hello"]
        assert ob.stats.ambiguous == 1 and ob.stats.sent == 1


def _chained(error: Exception, cause: Exception) -> Exception:
    error.__cause__ = cause  # what PTB's ``raise TimedOut from err`` leaves
    return error


@pytest.mark.parametrize(("error", "ambiguous"), [
    (_chained(tg.TimedOut(), httpx.ConnectTimeout("connect")), False),
    (_chained(tg.TimedOut("Pool timeout"), httpx.PoolTimeout("pool")), False),
    (_chained(tg.NetworkError("httpx.ConnectError"), httpx.ConnectError("refused")), False),
    (_chained(tg.TimedOut(), httpx.ReadTimeout("read")), True),
    (_chained(tg.NetworkError("httpx.RemoteProtocolError: Server disconnected"),
              httpx.RemoteProtocolError("Server disconnected")), True),
    (tg.NetworkError("Bad Gateway"), True),  # a 502 after the body was sent
])
def test_telegram_tells_a_send_that_never_left_from_an_ambiguous_one(
    error: Exception, ambiguous: bool
) -> None:
    mapped = telegram_map_error(error)
    assert isinstance(mapped, TransientError)
    assert isinstance(mapped, MaybeSent) is ambiguous


async def test_signal_resends_once_and_counts_it(r: aioredis.Redis) -> None:
    # signal-cli's send has no idempotency key and no lookup: at least once, counted
    async with signal_harness() as h:
        ob = outbox_for(r, h.channel)
        h.fake.drop_after_accept("send")
        chat = GROUP_PREFIX + SIGNAL_GROUP
        assert await ob.handle(reply("signal", chat, "hello", "rs-1")) is True
        assert [m["message"] for m in h.fake.sent] == ["hello", "hello"]
        assert ob.stats.ambiguous == 1 and ob.stats.sent == 1
        assert (await ob.outcomes.counts())["signal:ambiguous"] == 1


async def test_matrix_dedupes_the_resend_by_its_transaction_id(r: aioredis.Redis) -> None:
    async with matrix_harness() as h:
        ob = outbox_for(r, h.channel)
        # twice: aiohttp itself retries an idempotent PUT once when a reused keep-alive
        # connection drops; the second drop reaches the outbox as ambiguous
        h.fake.drop_after_accept = 2
        assert await ob.handle(reply("matrix", MATRIX_ROOM, "hello", "rm-1")) is True
        [sent] = h.fake.sent  # the homeserver answered the retry with the first event
        assert ob.stats.ambiguous == 1 and ob.stats.sent == 1
        assert await ob.outcomes.outcome("rm-1") == {0: ("delivered", sent["event_id"])}


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    server = FakeSlack()
    await server.start()
    yield server
    await server.stop()


def slack_reply(chat_id: str, reply_id: str, reply_to: str | None) -> dict[str, str]:
    out = Outbound(channel="slack", chat_id=chat_id, text="hello", reply_id=reply_id,
                   reply_to_id=reply_to)
    return {"type": "reply", "data": out.model_dump_json()}


@pytest.mark.parametrize(("chat_id", "reply_to"), [
    ("C0GENERAL1", "1700000000.000100"),  # a channel: the reply goes to the thread
    ("D0DIRECT01", None),  # a 1:1 DM: inline, found in the conversation's history
])
async def test_slack_finds_the_post_by_its_metadata_and_does_not_repost(
    r: aioredis.Redis, slack: FakeSlack, chat_id: str, reply_to: str | None
) -> None:
    channel = SlackChannel.from_config("default", channel_block(slack, "http"),
                                       channel_env())
    ob = outbox_for(r, channel)
    other = Outbound(channel="slack", chat_id=chat_id, text="older", reply_id="rs-0",
                     reply_to_id=reply_to)
    [chunk] = channel.render(other.text)
    await channel.send_chunk(other, chunk, 0)  # another reply's chunk is not mistaken
    slack.drop_after_accept("chat.postMessage")
    assert await ob.handle(slack_reply(chat_id, "rs-1", reply_to)) is True
    assert [p["text"] for p in slack.posted] == ["older", "hello"]
    assert ob.stats.ambiguous == 1 and ob.stats.sent == 1
    assert await ob.outcomes.outcome("rs-1") == {0: ("delivered", slack.posted[1]["ts"])}
    looked = [m for m, _ in slack.calls if m.startswith("conversations.")]
    assert looked == ["conversations.replies" if reply_to else "conversations.history"]


@pytest.mark.parametrize(("error", "ambiguous"), [
    (aiosmtplib.SMTPConnectError("refused"), False),
    (aiosmtplib.SMTPConnectTimeoutError("connect timeout"), False),
    (ConnectionRefusedError(111, "refused"), False),
    (aiosmtplib.SMTPServerDisconnected("gone after DATA"), True),
    (aiosmtplib.SMTPReadTimeoutError("no 250 in time"), True),
])
def test_smtp_tells_a_send_that_never_left_from_an_ambiguous_one(
    error: Exception, ambiguous: bool
) -> None:
    mapped = map_smtp_error(error, throttle_wait=1.0)
    assert isinstance(mapped, TransientError)
    assert isinstance(mapped, MaybeSent) is ambiguous


async def test_whatsapp_finds_the_send_by_its_status_webhook(r: aioredis.Redis) -> None:
    async with whatsapp_started() as h:
        ob = outbox_for(r, h.channel)
        h.fake.drop_after_accept = 1
        handling = asyncio.create_task(ob.handle(reply("whatsapp", ALICE, "hello", "rw-1")))
        async def accepted() -> bool:
            return len(h.fake.sent) == 1

        await eventually(accepted)
        # the status comes later than the outbox's first retry would (its backoff is at
        # most 1 s), well inside the channel's wait for it
        await asyncio.sleep(1.5)
        await h.fake.deliver_statuses("sent")  # carries the tracker: reply id and index
        assert await handling is True
        [sent] = h.fake.sent
        assert ob.stats.ambiguous == 1 and ob.stats.sent == 1
        assert await ob.outcomes.outcome("rw-1") == {0: ("delivered", sent["wamid"])}


async def test_whatsapp_without_a_status_in_time_sends_again(r: aioredis.Redis) -> None:
    async with whatsapp_started() as h:
        h.channel.status_wait = 0.2  # no status webhook will come
        ob = outbox_for(r, h.channel)
        h.fake.drop_after_accept = 1
        assert await ob.handle(reply("whatsapp", ALICE, "hello", "rw-2")) is True
        assert [m["text"]["body"] for m in h.fake.sent] == ["hello", "hello"]
        assert ob.stats.ambiguous == 1


async def test_slack_answered_after_the_read_timeout_is_found_not_reposted(
    r: aioredis.Redis, slack: FakeSlack
) -> None:
    channel = SlackChannel.from_config(
        "default", channel_block(slack, "http", request_timeout=1), channel_env())
    ob = outbox_for(r, channel)
    slack.answer_late("chat.postMessage", 2.0)  # posted at once, answered after 1 s
    assert await ob.handle(slack_reply("C0GENERAL1", "rs-late", "1700000000.000100")) is True
    [posted] = slack.posted
    assert ob.stats.ambiguous == 1 and ob.stats.sent == 1
    assert await ob.outcomes.outcome("rs-late") == {0: ("delivered", posted["ts"])}
