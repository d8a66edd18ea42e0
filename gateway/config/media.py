"""``[media]``: files people send (issue 28): what is downloaded, how much is kept.

Sizes are bytes. A file over ``max_file_bytes``, of a type outside ``allowed_types``
(decided from its bytes: ``gateway.media.sniff``) or that would take its group past
``max_group_bytes`` is not kept and the sender gets one short reply saying so.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: mime types kept by default (the names ``gateway.media.sniff`` gives)
DEFAULT_TYPES = (
    "image/png", "image/jpeg", "image/gif", "image/webp",
    "audio/ogg", "audio/mpeg", "audio/mp4", "audio/wav", "video/mp4",
    "application/pdf", "text/plain",
)


class MediaConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    #: download attachments at all (off: the model sees their metadata only)
    enabled: bool = True
    #: biggest file downloaded; 20 MB is what Telegram's Bot API serves with getFile
    max_file_bytes: int = Field(default=20_000_000, gt=0)
    #: most bytes of files one group keeps
    max_group_bytes: int = Field(default=500_000_000, gt=0)
    #: days a file is kept after it was last received; 0 keeps files until forgotten
    retention_days: float = Field(default=90.0, ge=0)
    #: mime types kept, decided from the bytes
    allowed_types: list[str] = Field(default_factory=lambda: list(DEFAULT_TYPES))
    #: tries of one download that fails transiently (network, 5xx, 429) before giving up
    attempts: int = Field(default=5, ge=1, le=20)
