"""Slack harnesses for the shared adapter contract suite (tests/channels/kit.py).

Two receive modes, one fake, both through the adapter's slack-bolt ``AsyncApp``:
``slack-http`` POSTs signed Events API requests to the adapter's aiohttp route (Bolt's
aiohttp adapter and request verification); ``slack-socket`` pushes ``events_api``
envelopes over the fake's Socket Mode websocket to Bolt's ``AsyncSocketModeHandler`` (the
real slack_sdk aiohttp client underneath). Outbound goes through the real
AsyncWebClient to the fake's chat.postMessage in both.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from channels.base import Channel, Chunk
from channels.models import Outbound
from channels.slack import SlackChannel
from tests.channels.kit import (
    AdapterHarness,
    HarnessSpec,
    MemoryCursorStore,
    RecordingSink,
    Sent,
    SentFile,
    fences_balanced,
    load_fixture,
)
from tests.channels.redelivery import Redelivery
from tests.fakes.slack_api import (
    APP_TOKEN,
    BOT_TOKEN,
    SIGNING_SECRET,
    Failure,
    FakeSlack,
    channel_block,
    channel_env,
    signed_headers,
)

#: The users.info answer for the fixtures' sender.
USERS = {
    "U0ALICE01": {
        "id": "U0ALICE01",
        "team_id": "T0TEAM001",
        "name": "alice",
        "real_name": "Alice Liddell",
        "profile": {"display_name": "Alice L.", "real_name": "Alice Liddell"},
        "is_bot": False,
    }
}



def _failure(status: int, retry_after: float | None) -> Failure:
    """The Slack error each contract status stands for."""
    if status == 429:
        return Failure(status=429, retry_after=int(retry_after or 1))
    if status == 403:
        return Failure(error="not_in_channel")  # HTTP 200, ok: false, as Slack does
    return Failure(status=status, error="internal_error")


class _SlackHarness:
    channel: Channel
    marker_fixture = "channel_message_plain"
    quotes_replies = False  # Slack threads by thread_ts; it has no per-message reply-to

    def __init__(self, fake: FakeSlack, channel: SlackChannel) -> None:
        self.fake = fake
        self.channel = channel
        self.slack = channel
        self.sink = RecordingSink()
        self.cursors = MemoryCursorStore()
        self.secrets = [BOT_TOKEN, APP_TOKEN, SIGNING_SECRET]

    def sent(self) -> list[Sent]:
        out: list[Sent] = []
        for post in self.fake.posted:
            blocks = post.get("blocks")
            text = blocks[0]["text"]["text"] if blocks else post.get("text", "")
            out.append(
                Sent(
                    chat_id=str(post["channel"]),
                    text=text,
                    thread_id=post.get("thread_ts"),
                    formatted=bool(blocks),
                )
            )
        return out

    def sent_files(self) -> list[SentFile]:
        return [SentFile(f["channel"], f["name"], f["data"], f["initial_comment"] or "",
                         f["thread_ts"]) for f in self.fake.shared_files]

    def fail_next_send(self, status: int, retry_after: float | None = None) -> None:
        self.fake.fail_next("chat.postMessage", _failure(status, retry_after))

    def outbound(self, text: str) -> Outbound:
        return Outbound(
            channel="slack",
            chat_id="C0GENERAL1",
            thread_id="1700000050.000100",
            reply_to_id="1700000051.000200",
            text=text,
            reply_id="contract-reply",
        )

    def chunk_well_formed(self, chunk: Chunk) -> bool:
        return fences_balanced(chunk.text)


class HttpHarness(_SlackHarness):
    """Events API: each inject is one signed POST; 5xx deliveries are re-POSTed."""

    def __init__(self, fake: FakeSlack, channel: SlackChannel, client: TestClient[Any, Any]):
        super().__init__(fake, channel)
        self.client = client
        self.deliveries = Redelivery(self._post)

    async def _post(self, fixture: str) -> int:
        body = json.dumps(load_fixture("slack", fixture)).encode()
        response = await self.client.post(
            self.slack.webhook_path, data=body, headers=signed_headers(body)
        )
        return response.status

    async def inject(self, fixture: str) -> None:
        await self.deliveries.deliver(fixture)

    async def redeliver_pending(self) -> None:
        await self.deliveries.redeliver_pending()

    async def acked(self, fixture: str) -> bool | None:
        status = self.deliveries.answered.get(fixture)
        return status is not None and 200 <= status < 300


class SocketHarness(_SlackHarness):
    """Socket Mode: each inject is one envelope; unacked ones are resent as Slack does."""

    def __init__(self, fake: FakeSlack, channel: SlackChannel) -> None:
        super().__init__(fake, channel)
        self.envelopes: dict[str, list[str]] = {}
        self.attempts: dict[str, int] = {}

    async def _push(self, fixture: str) -> None:
        payload = load_fixture("slack", fixture)
        attempt = self.attempts.get(fixture, -1) + 1
        self.attempts[fixture] = attempt
        envelope = await self.fake.push_event(
            payload["event"], event_id=payload["event_id"], retry_attempt=attempt
        )
        self.envelopes.setdefault(fixture, []).append(envelope)

    async def inject(self, fixture: str) -> None:
        await self._push(fixture)

    async def redeliver_pending(self) -> None:
        for fixture, envelopes in list(self.envelopes.items()):
            if not any(e in self.fake.acks for e in envelopes):
                await self._push(fixture)

    async def acked(self, fixture: str) -> bool | None:
        return any(e in self.fake.acks for e in self.envelopes.get(fixture, []))


@asynccontextmanager
async def http_harness() -> AsyncIterator[AdapterHarness]:
    fake = FakeSlack(users=dict(USERS))
    await fake.start()
    channel = SlackChannel.from_config("default", channel_block(fake, "http"), channel_env())
    app = web.Application()
    app.add_routes(channel.web_routes())
    try:
        async with TestClient(TestServer(app)) as client:
            harness = HttpHarness(fake, channel, client)
            channel.bind(harness.cursors)
            await channel.start(harness.sink)
            try:
                yield harness
            finally:
                await channel.stop()
    finally:
        await fake.stop()


@asynccontextmanager
async def socket_harness() -> AsyncIterator[AdapterHarness]:
    fake = FakeSlack(users=dict(USERS))
    await fake.start()
    channel = SlackChannel.from_config("default", channel_block(fake), channel_env())
    harness = SocketHarness(fake, channel)
    channel.bind(harness.cursors)
    try:
        await channel.start(harness.sink)
        await fake.wait_connected()
        try:
            yield harness
        finally:
            await channel.stop()
    finally:
        await fake.stop()


HARNESSES = [
    HarnessSpec(id="slack-http", platform="slack", factory=http_harness),
    HarnessSpec(id="slack-socket", platform="slack", factory=socket_harness),
]
