"""The long-polling loop: getUpdates, normalize, sink, and only then move the offset.

Promises:

* The update offset moves past an update only after the sink returned for it, and it
  is persisted through the cursor store right then, so a restart resumes exactly there:
  nothing lost, nothing replayed (at most the one update whose cursor write was lost,
  which the inbox dedupes).
* When the sink raises, the loop backs off and fetches again from the same offset:
  Telegram redelivers the update.
* Errors back off with jittered exponential delay (capped); Telegram's ``retry_after``
  is obeyed exactly; a refused token stops the loop with one clear log line.
* A watchdog cancels a poll that outlived its long-poll timeout plus a grace period
  (a silently dropped connection) and the loop polls again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings

from telegram import Bot, Update
from telegram import error as tg

from channels.base import CursorStore, InboundSink
from channels.retry import Backoff
from channels.telegram.errors import retry_after_seconds
from channels.telegram.normalize import BotIdentity, normalize_update
from channels.telegram.settings import TelegramSettings

log = logging.getLogger(__name__)

OFFSET_KEY = "offset"


class Poller:
    """Runs ``getUpdates`` long polling for one bot until cancelled."""

    def __init__(
        self,
        bot: Bot,
        settings: TelegramSettings,
        identity: BotIdentity,
        sink: InboundSink,
        cursors: CursorStore | None,
        account: str = "default",
    ) -> None:
        self._bot = bot
        self._settings = settings
        self._identity = identity
        self._sink = sink
        self._cursors = cursors
        self._account = account
        self.offset: int | None = None
        #: consecutive failures drive the backoff (``channels.retry``); reset on success
        self._backoff_policy = Backoff(settings.backoff_initial, settings.backoff_max)
        #: polls the watchdog had to cancel
        self.stalls = 0
        #: set when Telegram refused the bot for good; the loop has stopped
        self.fatal: str | None = None
        self._inflight: asyncio.Task[tuple[Update, ...]] | None = None
        self._inflight_since = 0.0

    def __repr__(self) -> str:
        return f"Poller(offset={self.offset}, failures={self.failures}, stalls={self.stalls})"

    async def run(self) -> None:
        self.offset = await self._load_offset()
        watchdog = asyncio.create_task(self._watchdog(), name="telegram-poll-watchdog")
        try:
            while self.fatal is None:
                updates = await self._poll()
                if updates is not None:
                    await self._handle(updates)
        finally:
            watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watchdog

    async def _load_offset(self) -> int | None:
        if self._cursors is None:
            return None
        while True:  # without the stored offset, polling would replay; wait for the store
            try:
                stored = await self._cursors.get(OFFSET_KEY)
                break
            except Exception as error:
                log.warning(
                    "telegram: cursor store unavailable (%s); retrying", type(error).__name__
                )
                await self._backoff()
        self._backoff_policy.reset()
        if stored is None:
            return None
        try:
            return int(stored)
        except ValueError:
            log.warning("telegram: ignoring unreadable stored update offset %r", stored)
            return None

    async def _poll(self) -> tuple[Update | int, ...] | None:
        """One getUpdates; None after a handled failure (already backed off)."""
        loop = asyncio.get_running_loop()
        self._inflight_since = loop.time()
        self._inflight = asyncio.create_task(
            self._bot.get_updates(
                offset=self.offset,
                timeout=self._settings.poll_timeout,
                allowed_updates=self._settings.allowed_updates,
                # the watchdog, not httpx, decides when a long poll is stuck
                read_timeout=self._settings.stall_grace * 2,
            )
        )
        try:
            updates = await self._inflight
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                self._inflight.cancel()
                raise
            self.stalls += 1
            log.warning("telegram: poll stalled; the watchdog restarted it")
            return None
        except tg.RetryAfter as error:
            delay = retry_after_seconds(error)
            log.warning("telegram: getUpdates rate limited; waiting %.0fs as asked", delay)
            await asyncio.sleep(delay)
            return None
        except (tg.InvalidToken, tg.Forbidden) as error:
            self.fatal = type(error).__name__
            log.error(
                "telegram: the bot token was refused (%s); polling stopped. "
                "Check the token from @BotFather.",
                self.fatal,
            )
            return None
        except tg.Conflict:
            log.warning(
                "telegram: getUpdates conflict: another process polls this bot or a "
                "webhook is set; retrying"
            )
            await self._backoff()
            return None
        except (tg.TelegramError, OSError) as error:
            log.warning("telegram: getUpdates failed (%s); backing off", type(error).__name__)
            await self._backoff()
            return None
        except Exception as error:
            # PTB parses the whole batch at once: one malformed update fails all of them
            log.warning(
                "telegram: getUpdates answer not parseable (%s); parsing one by one",
                type(error).__name__,
            )
            return await self._fetch_one_by_one()
        finally:
            self._inflight = None
        self._backoff_policy.reset()
        return updates

    async def _fetch_one_by_one(self) -> tuple[Update | int, ...] | None:
        """The pending batch as raw JSON, parsed update by update; a malformed update
        becomes its bare id (skipped, and the offset moves past it)."""
        kwargs: dict[str, object] = {
            "timeout": 0,
            "allowed_updates": self._settings.allowed_updates,
        }
        if self.offset is not None:
            kwargs["offset"] = self.offset
        try:
            with warnings.catch_warnings():  # PTB prefers get_updates; its parse is the problem
                warnings.simplefilter("ignore")
                raw = await self._bot.do_api_request("getUpdates", api_kwargs=kwargs)
        except (tg.TelegramError, OSError) as error:
            log.warning("telegram: getUpdates failed (%s); backing off", type(error).__name__)
            await self._backoff()
            return None
        items: list[Update | int] = []
        for data in raw if isinstance(raw, list) else []:
            update_id = data.get("update_id") if isinstance(data, dict) else None
            if not isinstance(update_id, int):
                continue  # without an id there is nothing to skip past
            try:
                items.append(Update.de_json(data, self._bot))
            except Exception as error:
                log.warning(
                    "telegram: malformed update %s skipped (%s)", update_id, type(error).__name__
                )
                items.append(update_id)
        return tuple(items)

    async def _handle(self, updates: tuple[Update | int, ...]) -> None:
        for update in updates:
            if isinstance(update, int):  # malformed, already logged
                self.offset = update + 1
                await self._save_offset(self.offset)
                continue
            try:
                inbound = normalize_update(update, self._identity, self._account)
            except Exception:  # a malformed update must not block the ones behind it
                log.exception(
                    "telegram: update %s could not be normalized; skipped", update.update_id
                )
                inbound = None
            if inbound is not None:
                try:
                    await self._sink(inbound)
                except Exception as error:
                    log.warning(
                        "telegram: inbox unavailable (%s); update %s will be fetched again",
                        type(error).__name__,
                        update.update_id,
                    )
                    await self._backoff()
                    return
            self.offset = update.update_id + 1
            await self._save_offset(self.offset)

    async def _save_offset(self, offset: int) -> None:
        if self._cursors is None:
            return
        try:
            await self._cursors.set(OFFSET_KEY, str(offset))
        except Exception as error:
            # The update is durable already; if this write is lost a restart replays
            # from the older offset and the inbox dedupes. Not worth stopping for.
            log.warning("telegram: could not persist update offset (%s)", type(error).__name__)

    @property
    def failures(self) -> int:
        """Consecutive failures; 0 after any successful poll."""
        return self._backoff_policy.failures

    async def _backoff(self) -> None:
        await self._backoff_policy.sleep()

    async def _watchdog(self) -> None:
        limit = self._settings.poll_timeout + self._settings.stall_grace
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(min(1.0, self._settings.stall_grace / 2))
            task = self._inflight
            if task is not None and not task.done() and loop.time() - self._inflight_since > limit:
                task.cancel()
