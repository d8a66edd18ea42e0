"""Telegram's getUpdates long polling, as the fetch of the shared receive loop
(``channels.pull``: sink, then the offset; backoff; stall watchdog).

Promises, beyond the loop's:

* The offset is Telegram's: ``update_id + 1`` after each update, so the loop commits
  it update by update (a dropped or malformed update moves it too, or Telegram would
  resend it forever).
* One malformed update does not block the batch: python-telegram-bot parses a batch
  at once, so a batch that fails to parse is fetched again as raw JSON and parsed one
  by one; a malformed update is logged and skipped.
* Telegram's ``retry_after`` is obeyed exactly; a refused token stops the loop with
  one clear log line.
"""

from __future__ import annotations

import logging
import warnings

from telegram import Bot, Update
from telegram import error as tg

from channels.base import CursorStore, InboundSink
from channels.errors import PermanentError, RateLimited
from channels.pull import Batch, Item, PullLoop
from channels.telegram.errors import retry_after_seconds
from channels.telegram.normalize import BotIdentity, normalize_update
from channels.telegram.settings import TelegramSettings

log = logging.getLogger(__name__)

OFFSET_KEY = "offset"


def poll_loop(
    bot: Bot,
    settings: TelegramSettings,
    identity: BotIdentity,
    sink: InboundSink,
    cursors: CursorStore | None,
    account: str = "default",
) -> PullLoop:
    """The receive loop of one bot in polling mode (``await loop.run()``)."""
    fetch = Updates(bot, settings, identity, account)
    return PullLoop(
        fetch, sink, cursors, OFFSET_KEY,
        backoff=settings.backoff(),
        # a long poll outliving its timeout plus the grace was dropped silently
        stall_after=settings.poll_timeout + settings.stall_grace,
        log=log, name="telegram",
    )


class Updates:
    """``await updates(offset)``: one getUpdates, as a ``Batch`` with the offset after
    each update."""

    def __init__(
        self, bot: Bot, settings: TelegramSettings, identity: BotIdentity, account: str
    ) -> None:
        self._bot = bot
        self._settings = settings
        self._identity = identity
        self._account = account
        self._unreadable: str | None = None

    async def __call__(self, cursor: str | None) -> Batch:
        offset = self._offset(cursor)
        try:
            updates: tuple[Update | int, ...] = await self._bot.get_updates(
                offset=offset,
                timeout=self._settings.poll_timeout,
                allowed_updates=self._settings.allowed_updates,
                # the loop's stall watchdog, not httpx, decides when a long poll is stuck
                read_timeout=self._settings.stall_grace * 2,
            )
        except tg.RetryAfter as error:
            raise RateLimited(retry_after_seconds(error), "getUpdates") from None
        except (tg.InvalidToken, tg.Forbidden) as error:
            raise PermanentError(
                type(error).__name__,
                "the bot token was refused; check the token from @BotFather",
            ) from None
        except tg.Conflict:
            log.warning("telegram: getUpdates conflict: another process polls this bot or a "
                        "webhook is set")
            raise
        except (tg.TelegramError, OSError):
            raise
        except Exception as error:
            # PTB parses the whole batch at once: one malformed update fails all of them
            log.warning(
                "telegram: getUpdates answer not parseable (%s); parsing one by one",
                type(error).__name__,
            )
            updates = await self._fetch_one_by_one(offset)
        return Batch([self._item(update) for update in updates])

    def _item(self, update: Update | int) -> Item:
        if isinstance(update, int):  # malformed, already logged
            return Item(None, str(update + 1))
        try:
            inbound = normalize_update(update, self._identity, self._account)
        except Exception:  # a malformed update must not block the ones behind it
            log.exception("telegram: update %s could not be normalized; skipped",
                          update.update_id)
            inbound = None
        return Item(inbound, str(update.update_id + 1))

    async def _fetch_one_by_one(self, offset: int | None) -> tuple[Update | int, ...]:
        """The pending batch as raw JSON, parsed update by update; a malformed update
        becomes its bare id (skipped, and the offset moves past it)."""
        kwargs: dict[str, object] = {
            "timeout": 0,
            "allowed_updates": self._settings.allowed_updates,
        }
        if offset is not None:
            kwargs["offset"] = offset
        with warnings.catch_warnings():  # PTB prefers get_updates; its parse is the problem
            warnings.simplefilter("ignore")
            raw = await self._bot.do_api_request("getUpdates", api_kwargs=kwargs)
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


    def _offset(self, cursor: str | None) -> int | None:
        if cursor is None:
            return None
        try:
            return int(cursor)
        except ValueError:
            if cursor != self._unreadable:  # once, not at every poll
                log.warning("telegram: ignoring unreadable stored update offset %r", cursor)
                self._unreadable = cursor
            return None
