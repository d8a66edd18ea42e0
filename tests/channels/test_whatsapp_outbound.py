"""WhatsApp sends: the 24-hour window and its template, statuses recorded against the
reply id, groups, idempotency, rate limits, rendering, configuration errors."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

import pytest
from pydantic import ValidationError

from channels.base import DeliveryReport
from channels.errors import PermanentError, RateLimited
from channels.models import Outbound
from channels.whatsapp import WhatsAppChannel
from channels.whatsapp.errors import OutsideWindow
from channels.whatsapp.render import render_chunks, to_whatsapp
from gateway.app import build_channels
from gateway.config import ConfigError, Settings
from tests.channels.harness_whatsapp import ALICE, WhatsAppHarness, channel_env, started
from tests.channels.kit import load_fixture
from tests.fakes.whatsapp_api import Failure

GROUP = "Y2FwaV9ncm91cDoxNzA1NTU1MDEzOToxMjAzNjM0MDQ2OTQyMzM4MjAZD"
TEMPLATE = {"name": "reply_waiting", "language": "en_US"}


def reply(text: str, reply_id: str = "turn-1", chat_id: str = ALICE) -> Outbound:
    return Outbound(channel="whatsapp", chat_id=chat_id, text=text, reply_id=reply_id,
                    reply_to_id="wamid.HBgLMTY1MDU1NTEyMzQVAgASGBQzQTAxAA==")


def close_window(harness: WhatsAppHarness, hours: float = 25) -> None:
    harness.cursors.values[f"window:{ALICE}"] = str(int(time.time() - hours * 3600))


@pytest.fixture
async def wa() -> AsyncIterator[WhatsAppHarness]:
    async with started() as harness:
        yield harness


@pytest.fixture
async def wa_template() -> AsyncIterator[WhatsAppHarness]:
    async with started(outside_window_template=TEMPLATE) as harness:
        yield harness


async def send_all(channel: WhatsAppChannel, message: Outbound) -> list[str]:
    return [await channel.send_chunk(message, chunk, i)
            for i, chunk in enumerate(channel.render(message.text))]


async def test_outside_the_window_the_configured_template_is_sent_once(
    wa_template: WhatsAppHarness,
) -> None:
    close_window(wa_template)
    message = reply("x" * 5000)  # two chunks
    chunks = wa_template.channel.render(message.text)
    assert len(chunks) == 2
    wamid = await wa_template.channel.send_chunk(message, chunks[0], 0)
    with pytest.raises(OutsideWindow):
        await wa_template.channel.send_chunk(message, chunks[1], 1)
    [sent] = wa_template.fake.sent
    assert sent["type"] == "template" and sent["to"] == ALICE
    assert sent["template"]["name"] == "reply_waiting"
    assert sent["template"]["language"]["code"] == "en_US"
    assert sent["biz_opaque_callback_data"] == "turn-1:0"
    outcome = wa_template.channel.outcome("turn-1")
    assert outcome is not None and outcome.via_template == "reply_waiting"
    assert outcome.wamids == {0: wamid}


async def test_outside_the_window_without_a_template_the_reason_is_recorded(
    wa: WhatsAppHarness, caplog: pytest.LogCaptureFixture
) -> None:
    close_window(wa)
    caplog.set_level(logging.WARNING)
    with pytest.raises(PermanentError) as caught:
        await send_all(wa.channel, reply("hello"))
    assert caught.value.reason == "outside_24h_window"
    assert wa.fake.sent == []
    outcome = wa.channel.outcome("turn-1")
    assert outcome is not None and outcome.state == "not_sent"
    assert "no outside_window_template configured" in (outcome.not_sent_reason or "")
    assert "reply turn-1" in caplog.text and "not sent" in caplog.text


async def test_a_user_with_no_known_message_is_outside_the_window(wa: WhatsAppHarness) -> None:
    with pytest.raises(OutsideWindow):
        await send_all(wa.channel, reply("hi", chat_id="16505550000"))
    assert wa.fake.sent == []


async def test_an_inbound_message_reopens_the_window(wa_template: WhatsAppHarness) -> None:
    close_window(wa_template)
    await wa_template.inject("text_dm")
    await wa_template.sink.wait_for(1)
    await send_all(wa_template.channel, reply("back in the window"))
    assert [s["type"] for s in wa_template.fake.sent] == ["text"]


async def test_api_window_refusal_131047_falls_back_to_the_template(
    wa_template: WhatsAppHarness,
) -> None:
    # our clock says open, the API says closed: trust the API
    wa_template.fake.fail_next(Failure(code=131047, message="Re-engagement message"))
    await send_all(wa_template.channel, reply("hello"))
    assert [s["type"] for s in wa_template.fake.sent] == ["template"]


async def test_statuses_are_recorded_against_the_reply_id(wa: WhatsAppHarness) -> None:
    message = reply("y" * 5000, reply_id="turn-7")
    ids = await send_all(wa.channel, message)
    outcome = wa.channel.outcome("turn-7")
    assert outcome is not None and outcome.state == "accepted"
    assert [s["biz_opaque_callback_data"] for s in wa.fake.sent] == ["turn-7:0", "turn-7:1"]
    assert set(await wa.fake.deliver_statuses("sent")) == {200}
    assert outcome.state == "sent"
    # out of order: read arrives before delivered; the newer status stays
    assert set(await wa.fake.deliver_statuses("read", "delivered")) == {200}
    assert outcome.statuses == {0: "read", 1: "read"} and outcome.state == "read"
    assert outcome.wamids == dict(enumerate(ids))
    assert wa.sink.calls == 0  # statuses never become messages


async def test_a_failed_status_is_recorded_and_logged(
    wa: WhatsAppHarness, caplog: pytest.LogCaptureFixture
) -> None:
    wa.fake.enforce_window = True  # the fake never saw Alice write: it fails the send
    caplog.set_level(logging.ERROR)
    await send_all(wa.channel, reply("hello", reply_id="turn-9"))
    await wa.fake.deliver_statuses()
    outcome = wa.channel.outcome("turn-9")
    assert outcome is not None and outcome.state == "failed"
    assert any(e.startswith("131047 Re-engagement message") for e in outcome.errors)
    assert "reply turn-9 failed (the 24-hour window had closed)" in caplog.text
    assert wa.channel.health()["last_failure"].startswith("reply turn-9 chunk 0")


async def test_status_for_a_reply_sent_before_a_restart_finds_it_by_tracker(
    wa: WhatsAppHarness,
) -> None:
    await wa.fake.deliver(load_fixture("whatsapp", "status_read"))
    outcome = wa.channel.outcome("turn-1")
    assert outcome is not None and outcome.statuses == {0: "read"}


async def test_group_reply_goes_to_the_group_id(wa: WhatsAppHarness) -> None:
    await wa.inject("group_mention")  # opens the group's window
    await wa.sink.wait_for(1)
    await send_all(wa.channel, reply("hello group", chat_id=GROUP))
    [sent] = wa.fake.sent
    assert sent["recipient_type"] == "group" and sent["to"] == GROUP


async def test_sending_a_chunk_twice_sends_it_once(wa: WhatsAppHarness) -> None:
    message = reply("once")
    chunk = wa.channel.render(message.text)[0]
    first = await wa.channel.send_chunk(message, chunk, 0)
    again = await wa.channel.send_chunk(message, chunk, 0)
    assert first == again and len(wa.fake.sent) == 1


async def test_pair_rate_limit_without_retry_after_waits_six_seconds(
    wa: WhatsAppHarness,
) -> None:
    wa.fake.fail_next(Failure(code=131056, status=400, message="Pair rate limit hit"))
    with pytest.raises(RateLimited) as caught:
        await send_all(wa.channel, reply("hi"))
    assert caught.value.retry_after == 6.0
    assert wa.channel.limits.per_chat_interval == 6.0


async def test_refused_token_fails_start_with_a_permanent_error() -> None:
    with pytest.raises(PermanentError) as caught:
        async with started(phone_number_id="999"):
            pass
    assert "error 100" in str(caught.value)


def test_markdown_becomes_whatsapp_formatting() -> None:
    text = "# Plan\n\n**bold** and _it_ and ~~gone~~, see [docs](https://x.example/a).\n\n" \
           "- one\n- two\n\n```py\nprint(1)\n```"
    assert to_whatsapp(text) == (
        "*Plan*\n\n*bold* and _it_ and ~gone~, see docs (https://x.example/a).\n\n"
        "- one\n- two\n\n```\nprint(1)\n```"
    )


def test_render_respects_the_4096_limit_even_when_links_grow() -> None:
    text = " ".join(f"<https://example.com/{i:04d}>" for i in range(400))
    chunks = render_chunks(text)
    assert len(chunks) >= 2
    assert all(len(c.text) <= 4096 for c in chunks)


def test_config_errors_name_the_key_or_variable() -> None:
    with pytest.raises(ValueError, match="WHATSAPP_APP_SECRET"):
        WhatsAppChannel.from_config("default", {"phone_number_id": "1"},
                                    {"WHATSAPP_TOKEN": "t", "WHATSAPP_VERIFY_TOKEN": "v"})
    with pytest.raises(ValidationError, match="template language"):
        WhatsAppChannel.from_config(
            "default", {"phone_number_id": "1",
                        "outside_window_template": {"name": "t", "language": "xx_YY"}},
            channel_env())
    config = Settings.model_validate({"channels": {"whatsapp": {"phone_number": "1"}}})
    with pytest.raises(ConfigError, match=r"channels\.whatsapp\.phone_number"):
        build_channels(config, channel_env())


async def test_a_user_behind_a_username_is_answered_by_business_scoped_id(
    wa: WhatsAppHarness,
) -> None:
    await wa.inject("username_dm")
    [inbound] = await wa.sink.wait_for(1)
    await send_all(wa.channel, reply("hi Carol", chat_id=inbound.chat_id))
    [sent] = wa.fake.sent
    assert sent["recipient"] == "US.13491208655302749999" and "to" not in sent


async def test_a_failed_status_is_reported_through_the_outcome_seam(wa: WhatsAppHarness) -> None:
    reports: list[DeliveryReport] = []

    async def sink(report: DeliveryReport) -> None:  # the gateway records these
        reports.append(report)

    wa.channel.bind_outcomes(sink)
    await send_all(wa.channel, reply("hello", reply_id="turn-11"))
    assert set(await wa.fake.deliver_statuses("sent", "delivered")) == {200}
    assert reports == []  # only a failure after sending is news to the gateway
    wa.fake.enforce_window = True
    await send_all(wa.channel, reply("again", reply_id="turn-12"))
    await wa.fake.deliver_statuses()
    [report] = reports
    assert (report.channel, report.reply_id, report.index, report.delivered) == (
        "whatsapp", "turn-12", 0, False)
    assert "24-hour window" in report.detail and "131047" in report.detail
