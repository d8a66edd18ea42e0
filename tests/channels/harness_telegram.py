"""Contract harness for the Telegram adapter: the local fake Bot API plus a real
``TelegramChannel`` (python-telegram-bot unmodified, pointed at the fake via base_url),
in long-polling mode and in webhook mode (the fake plays Telegram's POSTs)."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiohttp import web

from channels.base import Chunk
from channels.models import Outbound
from channels.telegram import TelegramChannel
from channels.telegram.poller import OFFSET_KEY
from tests.channels.kit import (
    AdapterHarness,
    HarnessSpec,
    MemoryCursorStore,
    RecordingSink,
    Sent,
    SentFile,
    load_fixture,
    tags_balanced,
)
from tests.fakes.telegram_api import BOT_TOKEN, FakeTelegram, failure_for, parse_html

WEBHOOK_SECRET = "wh-s3cret_Zq8-telegram-only"
GROUP_ID = -1001234567890
FORUM_ID = -1009876543210
TOPIC_ID = 77
#: a message in the forum topic that replies are threaded to
TRIGGER_ID = 510


def env() -> dict[str, str]:
    return {"TELEGRAM_BOT_TOKEN": BOT_TOKEN, "TELEGRAM_WEBHOOK_SECRET": WEBHOOK_SECRET}


def block(fake: FakeTelegram, **overrides: Any) -> dict[str, Any]:
    """A config block pointing the adapter at the fake, with test-sized timings."""
    return {
        "base_url": fake.base_url,
        "base_file_url": fake.base_file_url,
        "poll_timeout": 1,
        "backoff_initial": 0.01,
        "backoff_max": 0.05,
        "stall_grace": 1.0,
        **overrides,
    }


def new_fake() -> FakeTelegram:
    fake = FakeTelegram(forums={FORUM_ID: {TOPIC_ID}})
    fake.known_message(FORUM_ID, TRIGGER_ID)
    return fake


class TelegramHarness:
    """``AdapterHarness`` for Telegram; ``mode`` is "polling" or "webhook"."""

    marker_fixture = "private_text"
    quotes_replies = True

    def __init__(self, mode: str, fake: FakeTelegram, channel: TelegramChannel) -> None:
        self.mode = mode
        self.fake = fake
        self.channel = channel
        self.sink = RecordingSink()
        self.cursors = MemoryCursorStore()
        self.secrets = [BOT_TOKEN, WEBHOOK_SECRET]
        self.update_ids: dict[str, int] = {}

    async def inject(self, fixture: str) -> None:
        update = load_fixture("telegram", fixture)
        if self.mode == "polling":
            self.update_ids[fixture] = await self.fake.enqueue(update)
        else:
            self.update_ids[fixture], _ = await self.fake.deliver_webhook(update)

    async def redeliver_pending(self) -> None:
        if self.mode == "webhook":
            await self.fake.redeliver_failed()

    async def acked(self, fixture: str) -> bool | None:
        update_id = self.update_ids[fixture]
        if self.mode == "webhook":
            status = self.fake.webhook_statuses.get(update_id, 0)
            return 200 <= status < 300
        stored = await self.cursors.get(OFFSET_KEY)
        return stored is not None and int(stored) > update_id

    def sent(self) -> list[Sent]:
        out = []
        for record in self.fake.sent:
            reply = record.get("reply_parameters") or {}
            thread = record.get("message_thread_id")
            out.append(
                Sent(
                    chat_id=str(record["chat_id"]),
                    text=record["text"],
                    thread_id=str(thread) if thread is not None else None,
                    reply_to_id=str(reply["message_id"]) if reply else None,
                    formatted=str(record.get("parse_mode", "")).upper() == "HTML",
                )
            )
        return out

    def sent_files(self) -> list[SentFile]:
        return [SentFile(str(d["chat_id"]), d["name"], d["data"], d["caption"],
                         None if d["message_thread_id"] is None else str(d["message_thread_id"]))
                for d in self.fake.documents]

    def fail_next_send(self, status: int, retry_after: float | None = None) -> None:
        self.fake.fail_next("sendMessage", failure_for(status, retry_after))

    def outbound(self, text: str) -> Outbound:
        return Outbound(
            channel="telegram",
            chat_id=str(FORUM_ID),
            thread_id=str(TOPIC_ID),
            reply_to_id=str(TRIGGER_ID),
            text=text,
            reply_id="turn-1",
        )

    def chunk_well_formed(self, chunk: Chunk) -> bool:
        problem, _ = parse_html(chunk.text)
        return problem is None and tags_balanced(chunk.text)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@asynccontextmanager
async def telegram_harness(
    mode: str = "polling", **overrides: Any
) -> AsyncIterator[TelegramHarness]:
    """The fake started, the real adapter started against it (and, for webhooks, its
    route served on 127.0.0.1 and registered with the fake through setWebhook)."""
    fake = new_fake()
    await fake.start()
    runner: web.AppRunner | None = None
    try:
        config = block(fake, mode=mode, **overrides)
        if mode == "webhook":
            port = _free_port()
            config.setdefault("webhook_url", f"http://127.0.0.1:{port}/telegram/webhook")
        channel = TelegramChannel.from_config("default", config, env())
        harness = TelegramHarness(mode, fake, channel)
        channel.bind(harness.cursors)
        if mode == "webhook":
            app = web.Application()
            app.add_routes(channel.web_routes())
            runner = web.AppRunner(app, handle_signals=False)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port).start()
        await channel.start(harness.sink)
        try:
            yield harness
        finally:
            await channel.stop()
    finally:
        if runner is not None:
            await runner.cleanup()
        await fake.stop()


def _polling() -> Any:
    return telegram_harness("polling")


def _webhook() -> Any:
    return telegram_harness("webhook")


HARNESSES = [
    HarnessSpec("telegram-polling", "telegram", _polling),
    HarnessSpec("telegram-webhook", "telegram", _webhook),
]


def _conforms(harness: TelegramHarness) -> AdapterHarness:
    return harness  # mypy checks TelegramHarness against the protocol here
