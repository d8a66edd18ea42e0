"""The WhatsApp webhook: handshake, signatures, replays, malformed and deep bodies,
batched deliveries, and why pywa's own update dispatcher is not used for receiving."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from pywa_async.client import WhatsApp

from gateway.intake import build_app
from tests.channels.harness_whatsapp import WhatsAppHarness, channel_env, started
from tests.channels.kit import load_fixture
from tests.fakes.whatsapp_api import APP_SECRET, VERIFY_TOKEN, envelope, restamp, sign


def _nested(depth: int) -> bytes:
    inner: Any = []
    for _ in range(depth):
        inner = [inner]
    value = {"metadata": {"phone_number_id": "106540352242922"}, "messages": inner}
    return json.dumps({"object": "whatsapp_business_account",
                       "entry": [{"id": "1", "changes": [{"field": "messages",
                                                           "value": value}]}]}).encode()


@pytest.fixture
async def wa() -> AsyncIterator[WhatsAppHarness]:
    async with started() as harness:
        yield harness


@pytest.fixture
async def gateway_wa() -> AsyncIterator[WhatsAppHarness]:
    """The adapter's routes on the gateway's own web app (its body size limit)."""
    async with started() as harness:

        async def health() -> dict[str, Any]:
            return {"up": True, "ok": True, "degraded": []}

        server = TestServer(build_app([harness.channel], health), host="127.0.0.1")
        await server.start_server()
        harness.fake.webhook_url = str(server.make_url(harness.channel.webhook_path))
        try:
            yield harness
        finally:
            await server.close()


async def test_handshake_answers_only_the_right_token(wa: WhatsAppHarness) -> None:
    assert await wa.fake.handshake(VERIFY_TOKEN, "8675309") == (200, "8675309")
    assert (await wa.fake.handshake("wrong-token"))[0] == 403
    assert (await wa.fake.handshake(VERIFY_TOKEN[:-1]))[0] == 403
    assert (await wa.fake.handshake(VERIFY_TOKEN, mode="unsubscribe"))[0] == 403
    status, text = await wa.fake.handshake("wrong-token", "8675309")
    assert "8675309" not in text and status == 403
    assert (await wa.fake.handshake(VERIFY_TOKEN, challenge=""))[0] == 403


@pytest.mark.parametrize(
    "signature",
    [
        None,  # missing
        "sha256=" + "0" * 64,  # forged
        "sha1=" + "0" * 40,  # wrong scheme
        "",
        "sha256=" + "é" * 64,  # non-ASCII must not crash compare_digest
    ],
)
async def test_unsigned_or_forged_delivery_is_401_and_never_reaches_the_sink(
    wa: WhatsAppHarness, signature: str | None
) -> None:
    status = await wa.fake.deliver(load_fixture("whatsapp", "text_dm"), signature=signature)
    assert status == 401
    assert wa.sink.calls == 0


async def test_signature_under_another_secret_or_of_another_body_is_401(
    wa: WhatsAppHarness,
) -> None:
    payload = restamp(load_fixture("whatsapp", "text_dm"))
    body = json.dumps(payload).encode()
    other_secret = sign(body, APP_SECRET + "x")
    assert await wa.fake.deliver(payload, fresh=False, body=body, signature=other_secret) == 401
    tampered = body.replace(b"Hi claw", b"Hi CLAW")
    assert await wa.fake.deliver(payload, fresh=False, body=tampered,
                                 signature=sign(body)) == 401
    assert wa.sink.calls == 0
    assert wa.channel.health()["webhook_rejected"]["invalid signature"] == 2


async def test_stale_signed_delivery_is_401_and_a_fresh_one_passes(wa: WhatsAppHarness) -> None:
    eight_days_ago = int(time.time()) - 8 * 24 * 3600
    stale = restamp(load_fixture("whatsapp", "text_dm"), now=eight_days_ago)
    assert await wa.fake.deliver(stale, fresh=False) == 401
    assert wa.sink.calls == 0
    six_days_ago = int(time.time()) - 6 * 24 * 3600  # within Meta's retry horizon
    late = restamp(load_fixture("whatsapp", "text_dm"), now=six_days_ago)
    assert await wa.fake.deliver(late, fresh=False) == 200
    assert len(wa.sink.received) == 1


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"\xff\xfe\x00",
        b"[1, 2, 3]",
        b'"just a string"',
        b"[" * 100_000 + b"]" * 100_000,  # deeper than the parser's recursion limit
        _nested(40),  # parses, but deeper than any real delivery
        json.dumps({"object": "page", "entry": []}).encode(),
        json.dumps({"object": "whatsapp_business_account", "entry": "nope"}).encode(),
        json.dumps(envelope({"messages": [{"type": "text", "text": {"body": "no id"},
                                            "from": "1", "timestamp": "1"}]})).encode(),
        json.dumps(envelope({"messages": [{"type": "contacts", "id": "w1", "from": "1",
                                            "timestamp": "1", "contacts": [{"name": "x"}]}]
                             })).encode(),
        json.dumps(envelope({"messages": [{"type": "text", "id": "w2", "from": "1",
                                            "timestamp": "1", "text": "not an object"}]
                             })).encode(),
        json.dumps(envelope({"messages": [{"type": "text", "id": "w3", "from": "1",
                                            "timestamp": "soon", "text": {"body": "x"}}]
                             })).encode(),
    ],
    ids=["not-json", "not-utf8", "array", "string", "deep-100k", "deep-40", "wrong-object",
         "entry-not-list", "message-without-id", "contact-name-not-object",
         "text-not-object", "timestamp-not-a-number"],
)
async def test_malformed_signed_body_is_400_never_500(wa: WhatsAppHarness, body: bytes) -> None:
    status = await wa.fake.deliver({}, fresh=False, body=body, signature=sign(body))
    assert status == 400
    assert wa.sink.calls == 0


async def test_oversized_body_is_413_on_the_gateway_app(gateway_wa: WhatsAppHarness) -> None:
    body = b'{"object": "' + b"x" * (5 * 1024 * 1024) + b'"}'
    try:
        status = await gateway_wa.fake.deliver({}, fresh=False, body=body, signature=sign(body))
    except aiohttp.ClientConnectionError:
        status = 413  # aiohttp may close the connection mid-upload after answering 413
    assert status == 413
    assert gateway_wa.sink.calls == 0
    # the route still works for a normal delivery afterwards
    assert await gateway_wa.fake.deliver(load_fixture("whatsapp", "text_dm")) == 200


async def test_every_message_of_a_batched_delivery_reaches_the_sink(wa: WhatsAppHarness) -> None:
    first = load_fixture("whatsapp", "text_dm")
    second = load_fixture("whatsapp", "group_plain")
    first["entry"][0]["changes"].append(second["entry"][0]["changes"][0])
    first["entry"].append(load_fixture("whatsapp", "image_caption")["entry"][0])
    assert await wa.fake.deliver(first) == 200
    got = await wa.sink.wait_for(3)
    assert [i.text for i in got] == ["Hi claw, what is on my list today?", "lunch at noon?",
                                     "the whiteboard from today"]


async def test_a_failing_sink_gets_503_and_the_redelivery_is_answered(
    wa: WhatsAppHarness,
) -> None:
    wa.sink.fail_next(1)
    assert await wa.fake.deliver(load_fixture("whatsapp", "text_dm")) == 503
    assert wa.fake.pending
    await wa.fake.redeliver_pending()
    assert wa.fake.deliveries[-1][1] == 200
    assert len(wa.sink.received) == 1


async def test_stopped_channel_answers_503_so_meta_retries(wa: WhatsAppHarness) -> None:
    await wa.channel.stop()
    assert await wa.fake.deliver(load_fixture("whatsapp", "text_dm")) == 503
    assert wa.sink.calls == 0


async def test_pywa_dispatch_acks_a_failed_handler_and_skips_its_redelivery() -> None:
    """Why receiving does not go through pywa's ``webhook_update_handler``: it answers
    200 although the handler (our sink) raised, and then drops Meta's redelivery as a
    duplicate: the message would be lost. The adapter's own endpoint answers 503."""
    env = channel_env()
    client = WhatsApp(phone_id="106540352242922", token=env["WHATSAPP_TOKEN"],
                      verify_token=VERIFY_TOKEN, app_secret=APP_SECRET)
    calls: list[str] = []

    async def not_durable(_: WhatsApp, message: Any) -> None:
        calls.append(message.id)
        raise ConnectionError("redis down")

    client.on_message()(not_durable)
    body = json.dumps(restamp(load_fixture("whatsapp", "text_dm"))).encode()
    assert await client.webhook_update_validator(body, sign(body)) is None
    first = await client.webhook_update_handler(body)
    second = await client.webhook_update_handler(body)
    assert first == ("ok", 200)  # acked although the handler failed
    assert second == ("ok", 200)
    assert len(calls) == 1  # the redelivery was skipped as a duplicate
