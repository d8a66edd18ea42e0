"""The worker context: what one worker process holds, built once, passed explicitly.

``WorkerContext`` carries the settings (with the model key), the Redis client jobs use
for the queue's scripts, the bounded cache of open group memories, the one inotify
instance their watchers share, and the process's event loop. ``python -m workers``
builds it before taking jobs and ``install``s it; a job (called by RQ by import path)
finds it with ``current()``. Tests build their own with ``WorkerContext(settings,
client)`` and pass it to the job (``ctx=``), or ``install`` it.

A forked child (RQ's forking worker) must not use its parent's event loop, watchers or
connections: ``current()`` notices the new pid and builds a fresh context.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

import redis

from gateway.config import REDIS_URL_ENV, Settings, load_worker_settings
from gateway.config.env import embed_threads as read_embed_threads
from memory_store import BaseMemory, GroupDirectory, MemoryCache, make_inotify

T = TypeVar("T")

#: open group memories kept per worker process: opening and closing one costs more than
#: a whole turn with a fast model; each holds inotify watches (one per memory folder)
MEMORY_CACHE_SIZE = 16


class WorkerContext:
    """Settings, Redis, open memories and the event loop of one worker process."""

    def __init__(self, settings: Settings, client: redis.Redis, *,
                 embed_threads: int | None = None) -> None:
        self.settings = settings
        self.redis = client
        self.pid = os.getpid()
        #: onnxruntime threads of the embedder (vector/hybrid); default $PNC_EMBED_THREADS
        self.embed_threads = read_embed_threads(os.environ) if embed_threads is None \
            else embed_threads
        options: dict[str, Any] = {}
        if settings.memory.backend != "file":  # the file backend embeds nothing
            # imported only here: the embedder's module loads numpy (0.15-0.5 s of a
            # worker's start), which a file-backend worker never uses
            from memory_store.index import default_embedder

            options["embedder"] = default_embedder(self.embed_threads)
        # one instance for every open group: the kernel allows 128 per user by default
        # (fs.inotify.max_user_instances), across all of that user's processes
        self.inotify = make_inotify()
        self.memories = MemoryCache(max_groups=MEMORY_CACHE_SIZE, inotify=self.inotify,
                                    **options, **settings.memory.backend_options())
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def from_environment(cls, redis_url: str | None = None) -> WorkerContext:
        """Read ``$PYNANOCLAW_CONFIG`` (and the model key); connect to ``redis_url``,
        else the configured Redis URL."""
        settings = load_worker_settings()
        url = redis_url or settings.redis.url or os.environ.get(REDIS_URL_ENV, "")
        if not url:
            raise RuntimeError(f"no Redis: set [redis] url or {REDIS_URL_ENV}")
        return cls(settings, redis.Redis.from_url(url))

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on this process's one event loop (not ``asyncio.run`` per job, so
        clients the agent caches stay bound to a live loop)."""
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    def group_memory(self, group: str) -> tuple[GroupDirectory, BaseMemory]:
        """The group's directory (ensured) and its open memory, from the process's
        cache (LRU bounded by count and memory, reopened when the group's folder or
        index is replaced: ``memory_store/_cache.py``).

        Safe to keep open across turns: turns of one group never overlap (the group
        lock), and the memory's index notices files other workers or people changed.
        """
        return self.memories.get(self.settings.data_dir, group, self.settings.memory.backend)

    def close(self) -> None:
        """Close open memories, the loop and the client (only in the process that made
        them)."""
        if self.pid != os.getpid():
            return
        self.memories.close()
        if self.inotify is not None:
            self.inotify.close()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()
        self.redis.close()


_installed: WorkerContext | None = None


def install(ctx: WorkerContext | None) -> None:
    """Make ``ctx`` the process's context (``None``: forget it, closing it)."""
    global _installed
    if _installed is not None and _installed is not ctx:
        _installed.close()
    _installed = ctx


def current(redis_url: str | None = None) -> WorkerContext:
    """The installed context of this process; built from the environment on first use
    (a job called outside ``python -m workers``), or from the parent's settings with a
    fresh connection in a forked child."""
    global _installed
    if _installed is None:
        _installed = WorkerContext.from_environment(redis_url)
    elif _installed.pid != os.getpid():
        kwargs = _installed.redis.connection_pool.connection_kwargs
        pool = redis.ConnectionPool(connection_class=_installed.redis.connection_pool
                                    .connection_class, **kwargs)
        _installed = WorkerContext(_installed.settings, redis.Redis(connection_pool=pool),
                                   embed_threads=_installed.embed_threads)
    return _installed
