"""The always-on process (``app.py``) and its command (``cli.py``), in rooms by concern:
``config/`` and ``queue/`` (the contract with the workers), ``intake/`` (a message on its
way in), ``outgoing/`` (a reply on its way out), ``operations/`` (running and operating
the bot), ``media/``, ``tasks/``, ``toolhost/``."""

from __future__ import annotations

import asyncio


async def wait_any(timeout: float, *events: asyncio.Event) -> bool:
    """Wait until one of ``events`` is set or ``timeout`` seconds passed; True when one
    is set. A loop's pause between two rounds: a stop (or a wake-up) ends it at once."""
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        done, _ = await asyncio.wait(waits, timeout=timeout,
                                     return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
    return bool(done)
