"""Signal: what signal-cli's send errors become (channel errors, one operator log line,
a /healthz state), and that nothing crash-loops: the stream keeps receiving."""

from __future__ import annotations

import logging

import pytest

from channels.errors import FormattingRejected, NetworkError, PermanentError, RateLimited
from channels.signal import SignalChannel
from tests.channels.harness_signal import MEMBERS, SignalHarness, block, env, signal_harness
from tests.fakes.signal_cli import (
    captcha_error,
    internal_error,
    rate_limit_error,
    untrusted_error,
    user_error,
)

TOKEN = "5fad97ac-7d06-4e44-b18a-b950b20148ff"


def _operator_lines(caplog: pytest.LogCaptureFixture, state: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "channels.signal" and r.levelno >= logging.ERROR
            and state in r.getMessage()]


async def _send(h: SignalHarness, text: str = "hello") -> str:
    out = h.outbound(text)
    return await h.channel.send_chunk(out, h.channel.render(out.text)[0], 0)


@pytest.mark.parametrize(
    ("error", "state", "raised", "advice"),
    [
        (captcha_error(MEMBERS[0], TOKEN), "captcha_required", RateLimited,
         f"submitRateLimitChallenge --challenge {TOKEN}"),
        (rate_limit_error(MEMBERS[0], 42), "rate_limited", RateLimited, "after 42s"),
        (untrusted_error(MEMBERS[0]), "untrusted_identity", PermanentError, "trust"),
    ],
    ids=["captcha", "rate-limit", "untrusted"],
)
async def test_operator_problem_logs_once_shows_in_health_and_clears(
    caplog: pytest.LogCaptureFixture, error: dict, state: str, raised: type, advice: str
) -> None:
    caplog.set_level(logging.INFO, logger="channels.signal")
    async with signal_harness() as h:
        assert h.channel.health()["state"] == "ok"
        for _ in range(3):  # the outbox retries: still one line for the operator
            h.fake.fail_next("send", error)
            with pytest.raises(raised):
                await _send(h)
        lines = _operator_lines(caplog, state)
        assert len(lines) == 1, lines
        assert advice in lines[0]
        status = h.channel.health()
        assert status["state"] == state
        assert advice in status["detail"]
        assert status["stream"] == "connected"  # no crash, still receiving
        await h.inject("dm_text")
        await h.sink.wait_for(1)
        await _send(h)  # it went through: the state clears
        assert h.channel.health()["state"] == "ok"
        assert len(_operator_lines(caplog, state)) == 1
        assert len(h.fake.sent) == 1


async def test_rate_limit_and_captcha_carry_the_servers_wait() -> None:
    async with signal_harness() as h:
        h.fake.fail_next("send", captcha_error(MEMBERS[0], TOKEN, retry_after=3600))
        with pytest.raises(RateLimited) as caught:
            await _send(h)
        assert caught.value.retry_after == 3600
        h.fake.fail_next("send", rate_limit_error(MEMBERS[0], None))  # signal-cli gave none
        with pytest.raises(RateLimited) as caught:
            await _send(h)
        assert caught.value.retry_after > 0


async def test_untrusted_sender_on_receive_is_reported() -> None:
    async with signal_harness() as h:
        await h.inject("untrusted_identity")
        await h.inject("dm_text")
        await h.sink.wait_for(1)
        assert h.channel.health()["state"] == "untrusted_identity"
        assert [i.message_id for i in h.sink.received] == [
            "a11ce000-0000-4000-8000-000000000002:1700000000001"]


@pytest.mark.parametrize(
    ("error", "raised", "reason"),
    [
        (internal_error(), NetworkError, None),
        (user_error("User is not a member in group"), PermanentError, "refused"),
        ({"code": -32601, "message": "Method not implemented", "data": None},
         PermanentError, "bad_request"),
    ],
    ids=["io-error", "not-a-member", "unknown-method"],
)
async def test_other_errors_map_without_an_operator_state(
    error: dict, raised: type, reason: str | None
) -> None:
    async with signal_harness() as h:
        h.fake.fail_next("send", error)
        with pytest.raises(raised) as caught:
            await _send(h)
        if reason is not None:
            assert caught.value.reason == reason
        assert h.channel.health()["state"] == "ok"


async def test_refused_style_falls_back_to_plain() -> None:
    async with signal_harness() as h:
        h.fake.fail_next("send", user_error("Invalid style: UNDERLINE"))
        out = h.outbound("**bold** move")
        chunk = h.channel.render(out.text)[0]
        with pytest.raises(FormattingRejected):
            await h.channel.send_chunk(out, chunk, 0)


async def test_wrong_proxy_credentials_are_permanent_and_named() -> None:
    async with signal_harness() as h:
        wrong = SignalChannel.from_config("default", block(h.fake), {"SIGNAL_PROXY_AUTH": "nope"})
        try:
            with pytest.raises(PermanentError) as caught:
                await wrong.send_chunk(h.outbound("x"), wrong.render("x")[0], 0)
            assert "401" in str(caught.value)
        finally:
            await wrong.stop()


def test_config_errors_name_the_key() -> None:
    with pytest.raises(ValueError, match="SIGNAL_PROXY_AUTH"):
        SignalChannel.from_config("default", {"number": "+15550001000",
                                              "auth_env": "SIGNAL_PROXY_AUTH"}, {})
    with pytest.raises(ValueError, match=r"E\.164"):
        SignalChannel.from_config("default", {"number": "5550001000"}, env())
    with pytest.raises(ValueError, match="http"):
        SignalChannel.from_config("default", {"number": "+15550001000", "url": "localhost:8080"},
                                  env())
