"""The live checks ``pynanoclaw init`` runs on the file it is about to write: the same
ones ``pynanoclaw status`` runs (``Channel.check()`` through ``gateway.operations._status``, the
model's one-token test through ``gateway.operations._smoke``), one channel at a time so a refused
token fails its own line and not the setup. Also: is Ollama answering on its port?
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import httpx

from gateway.config import ConfigError, Settings
from gateway.operations._smoke import check_model
from gateway.operations._status import Check, channel_check

#: a probe of a local port: anything listening answers well within this
PROBE_TIMEOUT = 0.5
#: the model's one-token test here; a hosted API answers in seconds
MODEL_CHECK_TIMEOUT = 60.0


def ollama_models(url: str) -> list[str] | None:
    """The models an Ollama server at ``url`` has pulled (``GET /api/tags``), or
    ``None`` when nothing answers there."""
    try:
        reply = httpx.get(url.rstrip("/") + "/api/tags", timeout=PROBE_TIMEOUT)
        reply.raise_for_status()
        models = reply.json().get("models", [])
        return [str(m["name"]) for m in models if isinstance(m, dict) and m.get("name")]
    except (httpx.HTTPError, ValueError, AttributeError):
        return None


def live_checks(path: Path, cfg: Settings) -> Iterator[Check]:
    """The model's and each channel's credential check for the config at ``path``."""
    yield _model_check(path, cfg)
    from gateway.app import build_channels

    for name, block in cfg.channels.items():
        if name == "local":  # no credential; its transport is the bot's own Redis
            yield Check("channel local", True, "no credential to check")
            continue
        one = cfg.model_copy(update={"channels": {name: block}})
        try:  # a missing variable is this channel's line (the adapter names it)
            channels = build_channels(one, os.environ)
        except ConfigError as err:
            yield Check(f"channel {name}", False, " ".join(str(err).split()))
            continue
        for (cname, account), channel in channels.items():
            yield asyncio.run(channel_check(f"channel {cname}:{account}", channel))


def _model_check(path: Path, cfg: Settings) -> Check:
    model = cfg.model
    if model.provider == "local":
        return Check("model", True, "local: no credential; `pynanoclaw chat` loads it")
    # the smoke test itself names an unset key variable, before any request
    problem = check_model(path, timeout=MODEL_CHECK_TIMEOUT)
    return Check("model", problem is None,
                 "answered a one-token test" if problem is None else problem)
