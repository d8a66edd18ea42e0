"""The Lua scripts of the queue (``lua/*.lua`` beside this file), read from disk once
per process and registered per client (EVALSHA, with redis-py's fallback to EVAL)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

LUA_DIR = Path(__file__).with_name("lua")
NAMES = ("push", "sweep", "take", "finish", "lock_acquire", "lock_renew", "lock_release",
         "turn_begin", "turn_publish", "outbox_ack", "gcra")


@functools.cache
def source(name: str) -> str:
    """The text of ``lua/<name>.lua`` (read once)."""
    if name not in NAMES:
        raise KeyError(f"no Lua script {name!r}")
    return (LUA_DIR / f"{name}.lua").read_text(encoding="utf-8")


class Scripts:
    """The scripts registered on one client (sync or async); ``scripts[name]`` is
    callable as ``(keys=[...], args=[...])``."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._registered: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        script = self._registered.get(name)
        if script is None:
            script = self._registered[name] = self._client.register_script(source(name))
        return script
