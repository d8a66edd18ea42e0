"""What the config's sections share: their base model and the checks of more than one."""

from __future__ import annotations

import re
from typing import Annotated, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, ConfigDict

T = TypeVar("T")

#: an environment variable's name, as POSIX shells write them
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def check_zone(name: str) -> str:
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{name!r} is not an IANA time zone name, e.g. \"Europe/Paris\""
                         ) from None
    return name


#: an IANA time zone name, checked
ZoneName = Annotated[str, AfterValidator(check_zone)]


def colon_key(item: str) -> bool:
    """Whether ``item`` is a group or user key: ``channel:id``, neither part empty."""
    channel, sep, rest = item.partition(":")
    return bool(sep and channel and rest)


def group_keyed(example: str) -> AfterValidator:
    """The check of a table keyed by group keys ``channel:chat_id``, for its field's
    ``Annotated`` type; ``example`` shows the table a key belongs in."""
    def check(groups: dict[str, T]) -> dict[str, T]:
        for key in groups:
            if not colon_key(key):
                raise ValueError(f"group key {key!r} must be 'channel:chat_id', e.g. {example}")
        return groups
    return AfterValidator(check)
