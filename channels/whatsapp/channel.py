"""``WhatsAppChannel``: Cloud API webhooks in, ``Inbound`` out; ``Outbound`` in, Graph
API ``/<phone_number_id>/messages`` out, through pywa's async client.

pywa sends (text, templates, recipient typing of phone numbers, BSUIDs and group ids)
and checks webhook signatures; its own update dispatcher is not used for receiving:
it answers 200 whatever a handler raised and marks a delivery as seen before handling
it, while this bot must answer non-200 (so Meta redelivers) until the message is
durable (tests/channels/test_whatsapp_webhook.py shows both).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from functools import partial
from typing import Any, Self

import httpx
from aiohttp import web
from pywa.types.templates import TemplateLanguage
from pywa_async.client import WhatsApp

from channels.base import (
    NO_CONTEXT,
    Channel,
    ChannelContext,
    ChannelLimits,
    Chunk,
    CursorStore,
    DeliveryReport,
    InboundSink,
)
from channels.download import read_capped
from channels.errors import AttachmentTooLarge, TransientError, mapped
from channels.models import Attachment, Outbound
from channels.pools import httpx_limits, httpx_transport
from channels.whatsapp.errors import OUTSIDE_WINDOW, OutsideWindow, map_error
from channels.whatsapp.files import send_media
from channels.whatsapp.normalize import Parsed, StatusEvent, parse_delivery
from channels.whatsapp.outcomes import DeliveryLog, DeliveryOutcome, ServiceWindow, tracker
from channels.whatsapp.render import WHATSAPP_TEXT_LIMIT, render_chunks
from channels.whatsapp.settings import WhatsAppSecrets, WhatsAppSettings, load_secrets
from channels.whatsapp.webhook import WebhookHandler

__all__ = ["WHATSAPP_LIMITS", "WhatsAppChannel"]

log = logging.getLogger(__name__)

#: how long ``find_sent`` waits for the status webhook of an ambiguous send, seconds
STATUS_WAIT = 10.0

#: Pair rate limit: one message every 6 seconds to the same user, with short bursts
#: allowed and paid back afterwards (Cloud API throughput docs, "pair rate limits").
WHATSAPP_LIMITS = ChannelLimits(
    max_message_len=WHATSAPP_TEXT_LIMIT, per_chat_interval=6.0, burst=5
)


class WhatsAppChannel(Channel):
    """One WhatsApp Business phone number on the Cloud API, receiving by webhook.

    Typing: the Cloud API's typing indicator also marks the user's message as read,
    which an operator may not want from a bot that only listens, so ``typing`` does
    nothing. Delivery statuses go to ``outcome(reply_id)`` and ``health()``; a ``failed``
    one is also reported to the gateway's delivery record (``outcome_sink``).
    """

    name = "whatsapp"
    limits = WHATSAPP_LIMITS

    def __init__(
        self, settings: WhatsAppSettings, secrets: WhatsAppSecrets, *, account: str = "default"
    ) -> None:
        self.settings = settings
        #: how long find_sent waits for an ambiguous send's status webhook, seconds
        self.status_wait = STATUS_WAIT
        self.account = account
        self._secrets = secrets
        self._session = httpx.AsyncClient(timeout=settings.request_timeout,
                                          limits=httpx_limits(), transport=httpx_transport())
        self._wa = WhatsApp(
            phone_id=settings.phone_number_id,
            token=secrets.token.get_secret_value(),
            session=self._session,
            api_version=settings.api_version,
        )
        # pywa always names graph.facebook.com; the configured origin (a fake, a proxy)
        # replaces it on the session pywa was given
        origin = settings.api_base_url.rstrip("/")
        self._session.base_url = httpx.URL(f"{origin}/v{settings.api_version}")
        self._sink: InboundSink | None = None
        self._window = ServiceWindow()
        self.deliveries = DeliveryLog()
        self._handler = WebhookHandler(
            account=account,
            app_secret=secrets.app_secret.get_secret_value(),
            verify_token=secrets.verify_token.get_secret_value(),
            max_event_age=settings.max_event_age,
            parse=self._parse,
            process=self._process,
        )

    def __repr__(self) -> str:
        return (f"WhatsAppChannel(account={self.account!r}, "
                f"phone_number_id={self.settings.phone_number_id!r})")

    @classmethod
    def from_config(cls, account: str, block: dict[str, Any], env: Mapping[str, str],
                    context: ChannelContext = NO_CONTEXT) -> Self:
        settings = WhatsAppSettings.model_validate(block)
        return cls(settings, load_secrets(settings, env), account=account)

    @property
    def webhook_path(self) -> str:
        return self.settings.webhook_path or (
            "/whatsapp/webhook" if self.account == "default"
            else f"/whatsapp/{self.account}/webhook")

    def bind(self, cursor_store: CursorStore) -> None:
        super().bind(cursor_store)
        self._window.bind(cursor_store)

    # -- life cycle -------------------------------------------------------------

    async def check(self) -> str | None:
        """The token and phone number id, checked together (GET the phone number):
        returns the number and its verified name; ``PermanentError`` when refused."""
        with mapped(Exception, partial(map_error, "get phone number")):
            number = await self._wa.get_business_phone_number()
        return f"{number.display_phone_number}, {number.verified_name}"

    async def start(self, sink: InboundSink) -> None:
        """Check the token and phone number id (GET the phone number), then accept
        deliveries. Raises PermanentError on a refused token or unknown number."""
        who = await self.check()
        self._sink = sink
        log.info("whatsapp[%s]: started for %s", self.account, who)

    async def stop(self) -> None:
        """Stop accepting deliveries (they get 503 and Meta redelivers them later). The
        HTTP client stays open: the gateway's outbox may still send after this."""
        self._sink = None

    def health(self) -> dict[str, Any]:
        """Webhook rejections by reason and delivery counts: what ``/healthz`` can show."""
        return {"receiving": self._sink is not None, "webhook_rejected":
                dict(self._handler.rejected), **self.deliveries.snapshot()}

    def outcome(self, reply_id: str) -> DeliveryOutcome | None:
        """What became of one reply: wamids, newest status per chunk, template, reason."""
        return self.deliveries.get(reply_id)

    # -- inbound ----------------------------------------------------------------

    def web_routes(self) -> list[web.RouteDef]:
        return [web.get(self.webhook_path, self._handler.verify),
                web.post(self.webhook_path, self._handler.deliver)]

    def _parse(self, payload: dict[str, Any]) -> Parsed:
        return parse_delivery(payload, channel=self.name, account=self.account,
                              phone_number_id=self.settings.phone_number_id)

    async def _process(self, parsed: Parsed) -> None:
        """Make every message durable, then record statuses. Raises when the sink
        raised: the webhook then answers 503 and Meta redelivers the whole body."""
        sink = self._sink
        if sink is None:
            raise RuntimeError("whatsapp channel not started")
        for inbound, sent_at in parsed.messages:
            await sink(inbound)
            await self._window.opened(inbound.chat_id, sent_at)
        for status in parsed.statuses:
            await self._record_status(status)

    async def _record_status(self, event: StatusEvent) -> None:
        outcome = self.deliveries.status(event)
        if event.status != "failed":
            return
        reply = outcome.reply_id if outcome is not None else "(unknown reply)"
        hint = " (the 24-hour window had closed)" if OUTSIDE_WINDOW in event.error_codes else ""
        reason = "; ".join(event.errors) or "no reason given"
        log.error("whatsapp[%s]: delivery of %s for reply %s failed%s: %s", self.account,
                  event.message_id, reply, hint, reason)
        index = next((i for i, w in (outcome.wamids.items() if outcome else ())
                      if w == event.message_id), None)
        if outcome is not None and index is not None and self.outcome_sink is not None:
            # the shared record (the next turn's note, /healthz); raising makes the
            # webhook answer 503, so Meta redelivers the status
            await self.outcome_sink(DeliveryReport(
                channel=self.name, account=self.account, chat_id=outcome.chat_id,
                reply_id=outcome.reply_id, index=index, delivered=False,
                detail=f"failed after sending{hint}: {reason}"))

    # -- outbound ---------------------------------------------------------------

    async def fetch_attachment(self, attachment: Attachment, max_bytes: int) -> bytes:
        """The media's URL from the Graph API (valid about 5 minutes, so fetched anew on
        every try), then the bytes with the token, streamed and cut at ``max_bytes``."""
        try:
            media = await self._wa.get_media_url(attachment.id)
            AttachmentTooLarge.check(media.file_size, max_bytes)
            data = await read_capped(self._wa.stream_media(media.url), max_bytes)
        except httpx.HTTPStatusError as exc:
            # an expired or not-yet-ready URL, or the CDN failing: a new URL may work
            raise TransientError(f"whatsapp media download: HTTP "
                                 f"{exc.response.status_code}") from None
        except Exception as exc:
            raise map_error("media download", exc) from None
        return data

    def render(self, text: str) -> list[Chunk]:
        return render_chunks(text, WHATSAPP_TEXT_LIMIT)

    async def send_chunk(self, message: Outbound, chunk: Chunk, index: int) -> str:
        """Send one chunk as a text message (the first one quoting ``reply_to_id``);
        returns its wamid. Idempotent per reply id and chunk within this process (the
        outbox's sent keys cover restarts). Outside the 24-hour window the configured
        template goes instead, once per reply, or ``OutsideWindow`` is raised with the
        reason recorded in the delivery outcome."""
        done = self.deliveries.wamid(message.reply_id, index)
        if done is not None:
            return done
        if not await self._window.is_open(message.chat_id):
            return await self._outside_window(message, index)
        try:
            sent = await self._wa.send_message(
                to=message.chat_id,
                text=chunk.text,
                reply_to_message_id=message.reply_to_id if index == 0 else None,
                tracker=tracker(message.reply_id, index),
            )
        except Exception as exc:
            error = map_error("send message", exc)
            if isinstance(error, OutsideWindow):
                return await self._outside_window(message, index)
            raise error from None
        self.deliveries.sent(message.reply_id, message.chat_id, index, sent.id)
        return sent.id

    async def send_file(self, message: Outbound, data: bytes, name: str, caption: str = ""
                        ) -> str:
        """Upload, then an image or document message (``whatsapp.files``) quoting
        ``reply_to_id``, with the tracker of (reply id, 0). The Cloud API has no
        idempotency key: a re-send after a lost answer is caught by the tracker's status
        webhook (``find_sent``; this process only), else the file goes twice. Outside the
        24-hour window no file goes (templates carry no file): ``OutsideWindow``."""
        done = self.deliveries.wamid(message.reply_id, 0)
        if done is not None:
            return done
        if not await self._window.is_open(message.chat_id):
            raise OutsideWindow("outside the 24-hour window: WhatsApp sends no file then")
        wamid = await send_media(self._wa, message.chat_id, data, name, caption,
                                 reply_to=message.reply_to_id,
                                 tracker=tracker(message.reply_id, 0))
        self.deliveries.sent(message.reply_id, message.chat_id, 0, wamid)
        return wamid

    async def find_sent(self, message: Outbound, index: int) -> str | None:
        """After an ambiguous send: the chunk's wamid if WhatsApp reported it. Every
        message carries its tracker (reply id and index) and the Cloud API echoes it in
        the status webhooks, usually within seconds; the Graph API has no call to look a
        message up, so this waits up to ``STATUS_WAIT`` for that webhook. Only statuses
        this gateway process receives count; none in time: None (send again)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.status_wait
        while True:
            found = self.deliveries.wamid(message.reply_id, index)
            if found is not None or loop.time() >= deadline:
                return found
            # polled: statuses are recorded by the webhook handler, a few per second
            await asyncio.sleep(0.1)

    async def _outside_window(self, message: Outbound, index: int) -> str:
        template = self.settings.outside_window_template
        if template is None or index > 0:
            reason = ("outside the 24-hour window, no outside_window_template configured"
                      if template is None else
                      "outside the 24-hour window; the template went with chunk 0")
            if index == 0:
                self.deliveries.not_sent(message.reply_id, message.chat_id, reason)
                log.warning("whatsapp[%s]: reply %s to %s not sent: %s", self.account,
                            message.reply_id, message.chat_id, reason)
            raise OutsideWindow(reason)
        with mapped(Exception, partial(map_error, "send template")):
            sent = await self._wa.send_template(
                to=message.chat_id,
                name=template.name,
                language=TemplateLanguage(template.language),
                tracker=tracker(message.reply_id, index),
            )
        self.deliveries.sent(message.reply_id, message.chat_id, index, sent.id,
                             template=template.name)
        log.info("whatsapp[%s]: reply %s fell outside the 24-hour window; sent template %s",
                 self.account, message.reply_id, template.name)
        return sent.id
