"""Fetch one attachment with its adapter, check it, store it: the answer is the
``Attachment`` as the turn will see it, ``stored`` (its file) or ``refused`` (why not).

Transient failures (network, 5xx, 429) are retried with tenacity, waiting at least what
a 429 asked for; the caps and the type allowlist come from ``[media]``. Nothing here
raises for a file that cannot be kept: the refusal is the result.
"""

from __future__ import annotations

import asyncio
import logging

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_attempt,
    wait_exponential_jitter,
)

from channels.base import Channel
from channels.errors import AttachmentTooLarge, PermanentError, RateLimited, TransientError
from channels.models import Attachment
from gateway.config.media import MediaConfig
from gateway.intake._groupfiles import GroupFiles
from gateway.media.sniff import Refused, sniff
from gateway.media.store import Received, put, used_bytes

log = logging.getLogger(__name__)

#: ``PermanentError.reason`` of ``Channel.fetch_attachment``'s default: the adapter
#: cannot download (yet); its files stay metadata, and nobody is told they were refused
NOT_DOWNLOADABLE = "not downloadable"
#: ``Attachment.refused`` of a file the platform would not give (gone, or failing past
#: every try): the model is told; the sender is not, as nothing they did caused it
DOWNLOAD_FAILED = "I could not download it"
#: first and longest wait between two tries of a download, seconds
RETRY_FIRST = 0.5
RETRY_MAX = 30.0

_backoff = wait_exponential_jitter(initial=RETRY_FIRST, max=RETRY_MAX)


def _wait(state: RetryCallState) -> float:
    """Exponential backoff, but never less than a 429's ``retry_after``."""
    exc = state.outcome.exception() if state.outcome is not None else None
    asked = exc.retry_after if isinstance(exc, RateLimited) else 0.0
    return max(float(_backoff(state)), min(asked, RETRY_MAX))


async def download(channel: Channel, att: Attachment, max_bytes: int, attempts: int
                   ) -> bytes:
    """The attachment's bytes; retries ``TransientError`` up to ``attempts`` tries."""
    async for attempt in AsyncRetrying(retry=retry_if_exception_type(TransientError),
                                       stop=stop_after_attempt(attempts), wait=_wait,
                                       reraise=True):
        with attempt:
            return await channel.fetch_attachment(att, max_bytes)
    raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover


def _mb(n: int) -> str:
    return f"{n / 1_000_000:g} MB"


async def fetch_one(cfg: MediaConfig, groupfiles: GroupFiles, group: str,
                    channel: Channel | None, att: Attachment, came: Received) -> Attachment:
    """``att`` downloaded and stored (``stored`` set, ``mime``/``size`` sniffed), or
    with ``refused`` saying why it was not kept, in words fit for the sender."""
    def refuse(why: str) -> Attachment:
        log.info("attachment %s of %s in %s not kept: %s", att.id, came.message_id,
                 group, why)
        return att.model_copy(update={"refused": why})

    if channel is None:
        return refuse(DOWNLOAD_FAILED)
    if att.size is not None and att.size > cfg.max_file_bytes:
        return refuse(f"it is over the {_mb(cfg.max_file_bytes)} limit")
    try:
        data = await download(channel, att, cfg.max_file_bytes, cfg.attempts)
    except AttachmentTooLarge:
        return refuse(f"it is over the {_mb(cfg.max_file_bytes)} limit")
    except (PermanentError, TransientError) as err:
        if isinstance(err, PermanentError) and err.reason == NOT_DOWNLOADABLE:
            return att  # the adapter has no download: metadata only
        log.warning("download of attachment %s of %s in %s failed: %s", att.id,
                    came.message_id, group, err)
        return refuse(DOWNLOAD_FAILED)
    if len(data) > cfg.max_file_bytes:  # an adapter that read past the cap
        return refuse(f"it is over the {_mb(cfg.max_file_bytes)} limit")
    try:
        sniffed = sniff(data)
    except Refused as err:
        return refuse(f"it is {err}")
    if sniffed.mime not in cfg.allowed_types:
        return refuse("it is a file type I don't accept")
    used = await asyncio.to_thread(used_bytes, groupfiles, group, data)
    if used + len(data) > cfg.max_group_bytes:
        return refuse(f"this chat's files are at their {_mb(cfg.max_group_bytes)} limit")
    stored = await asyncio.to_thread(put, groupfiles, group, data, sniffed, came)
    return att.model_copy(update={"stored": stored.stored, "mime": sniffed.mime,
                                  "size": stored.size})
