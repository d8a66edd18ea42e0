"""WhatsApp harness for the shared adapter contract suite (tests/channels/kit.py).

The fake Graph API (tests/fakes/whatsapp_api.py) delivers each recorded fixture as a
signed webhook POST to the adapter's real aiohttp route, served on 127.0.0.1; the
adapter sends through pywa's async client to the fake's ``/messages``. Deliveries
answered 5xx are re-POSTed by ``redeliver_pending``, as Meta retries them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from channels.base import Chunk
from channels.models import Outbound
from channels.whatsapp import WhatsAppChannel
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
from tests.fakes.whatsapp_api import (
    API_VERSION,
    APP_SECRET,
    PHONE_NUMBER_ID,
    TOKEN,
    VERIFY_TOKEN,
    Failure,
    FakeWhatsApp,
)

ALICE = "16505551234"


def channel_block(fake: FakeWhatsApp, **extra: Any) -> dict[str, Any]:
    return {"phone_number_id": PHONE_NUMBER_ID, "api_base_url": fake.base_url,
            "api_version": API_VERSION, **extra}


def channel_env() -> dict[str, str]:
    return {"WHATSAPP_TOKEN": TOKEN, "WHATSAPP_APP_SECRET": APP_SECRET,
            "WHATSAPP_VERIFY_TOKEN": VERIFY_TOKEN}


def failure(status: int, retry_after: float | None) -> Failure:
    """The Graph API error each contract status stands for."""
    if status == 429:
        return Failure(code=130429, status=429, message="Rate limit hit",
                       retry_after=retry_after)
    if status == 403:
        return Failure(code=10, status=403, message="Permission denied")
    return Failure(code=131000, status=status, message="Something went wrong")


class WhatsAppHarness:
    marker_fixture = "text_dm"
    quotes_replies = True

    def __init__(self, fake: FakeWhatsApp, channel: WhatsAppChannel) -> None:
        self.fake = fake
        self.channel = channel
        self.sink = RecordingSink()
        self.cursors = MemoryCursorStore()
        self.secrets = [TOKEN, APP_SECRET, VERIFY_TOKEN]
        self.deliveries = Redelivery(self._post)

    async def _post(self, fixture: str) -> int:
        return await self.fake.deliver(load_fixture("whatsapp", fixture))

    async def inject(self, fixture: str) -> None:
        await self.deliveries.deliver(fixture)

    async def redeliver_pending(self) -> None:
        await self.deliveries.redeliver_pending()

    async def acked(self, fixture: str) -> bool | None:
        status = self.deliveries.answered.get(fixture)
        return status is not None and status == 200

    def sent(self) -> list[Sent]:
        return [
            Sent(chat_id=str(body["to"]), text=body.get("text", {}).get("body", ""),
                 thread_id=None, reply_to_id=body.get("context", {}).get("message_id"),
                 formatted=True)
            for body in self.fake.sent
        ]

    def sent_files(self) -> list[SentFile]:
        """Image and document messages, with the upload each names."""
        out = []
        for body in self.fake.sent:
            media = body.get(body["type"], {})
            if body["type"] not in ("image", "document"):
                continue
            name, mime = self.fake.uploads[media["id"]]
            out.append(SentFile(str(body["to"]), media.get("filename") or name,
                                self.fake.media.files[media["id"]], media.get("caption", ""),
                                mime=mime))
        return out

    async def lose_next_answer(self) -> None:
        """The next message is sent, its answer never arrives (the connection drops)."""
        self.fake.drop_after_accept = 1

    async def answer_lost(self) -> None:
        """What the platform tells the adapter later: the status webhooks (trackers)."""
        await self.fake.deliver_statuses("sent")

    def fail_next_send(self, status: int, retry_after: float | None = None) -> None:
        self.fake.fail_next(failure(status, retry_after))

    def outbound(self, text: str) -> Outbound:
        return Outbound(channel="whatsapp", chat_id=ALICE, thread_id=None,
                        reply_to_id="wamid.HBgLMTY1MDU1NTEyMzQVAgASGBQzQTAxAA==",
                        text=text, reply_id="contract-reply")

    def chunk_well_formed(self, chunk: Chunk) -> bool:
        return fences_balanced(chunk.text)


@asynccontextmanager
async def started(**block: Any) -> AsyncIterator[WhatsAppHarness]:
    """The fake, the adapter's route on a local server, the adapter started; Alice
    wrote a minute ago (her 24-hour window is open) unless the test says otherwise."""
    fake = FakeWhatsApp()
    await fake.start()
    channel = WhatsAppChannel.from_config("default", channel_block(fake, **block), channel_env())
    app = web.Application()
    app.add_routes(channel.web_routes())
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        fake.webhook_url = str(server.make_url(channel.webhook_path))
        harness = WhatsAppHarness(fake, channel)
        harness.cursors.values[f"window:{ALICE}"] = str(int(time.time()) - 60)
        channel.bind(harness.cursors)
        await channel.start(harness.sink)
        try:
            yield harness
        finally:
            await channel.stop()
    finally:
        await server.close()
        await fake.stop()


@asynccontextmanager
async def webhook_harness() -> AsyncIterator[AdapterHarness]:
    async with started() as harness:
        yield harness


HARNESSES = [HarnessSpec(id="whatsapp-webhook", platform="whatsapp", factory=webhook_harness)]
