"""The Slack adapter on slack-bolt: request parsing limits, retries, payload triage.

The first two tests pin Bolt's own behaviour that ``channels/slack/webhook.py`` works
around (Bolt parses a body before it verifies it; it answers 500 for a non-numeric
timestamp). If a Bolt release changes either, they fail and the workaround can go.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from slack_bolt.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.request.async_request import AsyncBoltRequest

from channels.models import Inbound
from channels.slack import SlackChannel
from gateway.intake import build_app
from tests.fakes.slack_api import (
    SIGNING_SECRET,
    FakeSlack,
    channel_block,
    channel_env,
    event_callback,
    message_event,
    signed_headers,
)

#: A validly signed body this deep must not take the handler down (issue 11).
DEPTH = 100_000
#: gateway.intake._webhooks.build_app's client_max_size.
GATEWAY_MAX_BODY = 4 * 1024 * 1024


class Sink:
    def __init__(self) -> None:
        self.got: list[Inbound] = []
        self.fail = False

    async def __call__(self, inbound: Inbound) -> None:
        if self.fail:
            raise ConnectionError("redis down")
        self.got.append(inbound)


async def _healthy() -> dict[str, Any]:
    return {"up": True, "ok": True, "degraded": []}


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    server = FakeSlack(users={"U0ALICE01": {"id": "U0ALICE01", "name": "alice"}})
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
def sink() -> Sink:
    return Sink()


@pytest.fixture
async def client(fake: FakeSlack, sink: Sink) -> AsyncIterator[TestClient[Any, Any]]:
    """The adapter's route on the gateway's real web app (its body-size limit included)."""
    channel = SlackChannel.from_config("default", channel_block(fake, "http"), channel_env())
    await channel.start(sink)
    async with TestClient(TestServer(build_app([channel], _healthy))) as test_client:
        yield test_client
    await channel.stop()


async def post(client: TestClient[Any, Any], body: bytes, **headers: str) -> Any:
    return await client.post(
        "/slack/events", data=body, headers={**signed_headers(body), **headers}
    )


def deep_array(depth: int = DEPTH) -> bytes:
    return b"[" * depth + b"]" * depth


# -- what Bolt does on its own ---------------------------------------------------------


def test_bolt_parses_the_body_before_any_signature_check() -> None:
    """Why webhook.py catches parse errors itself: building Bolt's request object
    raises on these bodies, before Bolt's verification middleware could run."""
    headers = signed_headers(deep_array())
    with pytest.raises(RecursionError):
        AsyncBoltRequest(body=deep_array().decode(), headers=dict(headers))
    with pytest.raises(AttributeError):
        AsyncBoltRequest(body="[1, 2]", headers=dict(signed_headers(b"[1, 2]")))


async def test_bolt_answers_500_for_a_non_numeric_timestamp() -> None:
    """Why webhook.py refuses a non-numeric X-Slack-Request-Timestamp before Bolt."""

    async def authorize() -> AuthorizeResult:
        return AuthorizeResult(enterprise_id=None, team_id="T0TEAM001")

    app = AsyncApp(signing_secret=SIGNING_SECRET, authorize=authorize)
    body = json.dumps(event_callback(message_event("hi")))
    headers = dict(signed_headers(body.encode()), **{"X-Slack-Request-Timestamp": "soon"})
    response = await app.async_dispatch(AsyncBoltRequest(body=body, headers=headers))
    assert response.status == 500


# -- bodies Bolt cannot parse ----------------------------------------------------------


async def test_validly_signed_deep_json_is_400_and_the_route_keeps_working(
    client: TestClient[Any, Any], sink: Sink
) -> None:
    for body in (deep_array(), b'{"a":' * DEPTH + b"1" + b"}" * DEPTH):
        response = await post(client, body)
        assert response.status == 400
    assert sink.got == []
    ok = json.dumps(event_callback(message_event("still here", ts="1700000070.000100")))
    assert (await post(client, ok.encode())).status == 200
    assert [i.text for i in sink.got] == ["still here"]


async def test_forged_deep_json_is_401_not_400(client: TestClient[Any, Any], sink: Sink) -> None:
    body = deep_array()
    response = await client.post(
        "/slack/events", data=body, headers=signed_headers(body, secret="forged")
    )
    assert response.status == 401
    assert sink.got == []


async def test_invalid_utf8_is_401_not_500(client: TestClient[Any, Any], sink: Sink) -> None:
    """Bolt cannot parse it and slack_sdk's verifier signs text, so it cannot be checked;
    Slack only sends UTF-8, so it is treated as not from Slack."""
    body = b'{"type": "event_callback", "x": "\xff\xfe"}'
    assert (await post(client, body)).status == 401
    assert sink.got == []


async def test_oversized_body_is_413_before_parsing(
    client: TestClient[Any, Any], sink: Sink
) -> None:
    event = message_event("x" * (GATEWAY_MAX_BODY + 1), ts="1700000071.000100")
    body = json.dumps(event_callback(event)).encode()
    response = await post(client, body)
    assert response.status == 413
    assert sink.got == []
    # under the limit it is parsed and answered normally (the text is in the body twice:
    # as text and in its rich_text block)
    event = message_event("y" * (GATEWAY_MAX_BODY // 2 - 4096), ts="1700000072.000100")
    body = json.dumps(event_callback(event)).encode()
    assert (await post(client, body)).status == 200
    assert [i.message_id for i in sink.got] == ["1700000072.000100"]


#: Signed, valid JSON objects with fields of the wrong shape, each read by some part of
#: Bolt's context building (team, authorizations, enterprise, user, channel) or ours.
ODD_PAYLOADS = [
    {"type": "event_callback", "team": 5},
    {"type": "event_callback", "authorizations": 5},
    {"type": "event_callback", "event": {"type": 5}},
    {"type": "event_callback", "event": {"type": "message", "subtype": 5}},
    {"type": "event_callback", "event": {"type": "message", "channel": 5, "user": [], "ts": {}}},
    {"type": "event_callback", "event_id": 5,
     "event": {"type": "message", "channel": "C1", "user": "U1", "ts": "1.2", "blocks": "x"}},
    {"is_ext_shared_channel": True, "type": "event_callback", "event": 5},
    {"type": 5, "enterprise": 5, "user": 5, "channel": 5},
    {},
]


@pytest.mark.parametrize("payload", ODD_PAYLOADS)
async def test_signed_payloads_of_the_wrong_shape_never_get_5xx(
    client: TestClient[Any, Any], payload: dict[str, Any]
) -> None:
    """5xx would make Slack redeliver a payload that can never succeed."""
    response = await post(client, json.dumps(payload).encode())
    assert response.status in (200, 400)


# -- retries and payload triage ----------------------------------------------------------


async def test_retry_headers_after_a_failed_delivery_go_through_once(
    client: TestClient[Any, Any], sink: Sink
) -> None:
    payload = event_callback(message_event("hi", ts="1700000073.000100"), "Ev0RETRY02")
    body = json.dumps(payload).encode()
    sink.fail = True
    assert (await post(client, body)).status == 503
    sink.fail = False
    retry = await post(client, body, **{"X-Slack-Retry-Num": "1",
                                        "X-Slack-Retry-Reason": "http_error"})
    assert retry.status == 200
    # Slack retried again before it saw our 200: acked, not sunk twice.
    again = await post(client, body, **{"X-Slack-Retry-Num": "2",
                                        "X-Slack-Retry-Reason": "http_timeout"})
    assert again.status == 200
    assert [i.message_id for i in sink.got] == ["1700000073.000100"]


async def test_other_payload_types_are_acked_and_ignored(
    client: TestClient[Any, Any], sink: Sink
) -> None:
    rate_limited = {"token": "x", "type": "app_rate_limited", "team_id": "T0TEAM001",
                    "minute_rate_limited": 1518467820, "api_app_id": "A0APP0001"}
    response = await post(client, json.dumps(rate_limited).encode())
    assert response.status == 200
    assert sink.got == []


async def test_url_verification_without_a_challenge_is_400(
    client: TestClient[Any, Any],
) -> None:
    body = json.dumps({"type": "url_verification", "token": "x"}).encode()
    assert (await post(client, body)).status == 400


async def test_interactive_envelope_is_acked_in_socket_mode(fake: FakeSlack) -> None:
    sink = Sink()
    channel = SlackChannel.from_config("default", channel_block(fake), channel_env())
    await channel.start(sink)
    try:
        await fake.wait_connected()
        envelope = await fake.push_envelope(
            "interactive", {"type": "block_actions", "team": {"id": "T0TEAM001"},
                            "user": {"id": "U0ALICE01"}, "actions": []}
        )
        await fake.wait_ack(envelope)
        assert sink.got == []
    finally:
        await channel.stop()


def test_building_the_app_logs_no_token_warning(
    fake: FakeSlack, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Bolt reads SLACK_BOT_TOKEN from the environment itself and would warn, at every
    start, that ``authorize`` makes it unused; an operator should not see that."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-from-the-environment")
    caplog.set_level(logging.INFO)
    for mode in ("http", "socket"):
        SlackChannel.from_config("default", channel_block(fake, mode), channel_env())
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
