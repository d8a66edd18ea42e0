"""The model check run before a local chat opens: ``python -m workers.smoke`` in a
child process (the gateway never imports ``workers``, and a native crash in the model
library must not take this process with it).

``check_model`` returns ``None`` when the model answered, else the message to print:
what failed, and how to switch provider. A death by signal is named (SIGILL is a
llama.cpp built with instructions this CPU does not run).

Given a ``cache`` file, a local model's passed check is remembered (2-3 s of every
quickstart run on 2 cores) and skipped while nothing it depended on changed: the config
file's bytes, this Python, the CPU's flags, HOME and XDG_CACHE_HOME (where joined
weights live), and every file the child reported it used (the GGUF, the llama.cpp
library's modules, our model code), compared by size and mtime. Any change runs the
check again, and a failure forgets the pass, so a broken model is always named before
the chat opens. Remote providers are checked every time: their key is in the
environment, which is not remembered.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

#: Loading the local model takes a few seconds; a first import of the library and a cold
#: disk cache take longer. Generous, because a false failure blocks the chat.
SMOKE_TIMEOUT = 180.0
#: The prebuilt llama.cpp wheel needs AVX2/FMA on x86-64 (CPUs since 2013); an older CPU
#: gets one compiled for it (from source, at least 10 minutes on 2 cores).
REBUILD = (
    ".venv/bin/pip install --force-reinstall --no-deps --no-binary xllamacpp "
    "'xllamacpp>=2026.10,<2027'"
)
SWITCH = (
    'or set [model] provider = "anthropic" or "openai" in {config} (see README, '
    "Choosing the model)"
)


def describe_smoke_exit(returncode: int, stderr: str, config: Path) -> str:
    """The message for a smoke run that failed with ``returncode``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        cause = (
            "an illegal instruction: the prebuilt llama.cpp uses AVX2, which this CPU "
            f"lacks; compile it for this CPU with: {REBUILD}"
            if name == "SIGILL"
            else "a crash in the model library"
        )
        return (
            f"the local model died with {name} while generating one test token ({cause}); "
            + SWITCH.format(config=config)
        )
    text = stderr.strip() or f"exit status {returncode}"
    return text.removeprefix("error: ")


#: the file under the data dir where ``pynanoclaw chat`` / ``send`` remember a passed check
CACHE_NAME = ".model-check.json"
#: the line ``python -m workers.smoke`` prints, after its answer, with the files a local
#: model's check depended on (a JSON list of paths)
DEPENDS = "depends: "


def _cpu_flags() -> str:
    """The CPU's feature flags (x86 "flags", arm "Features"): a venv moved to a CPU
    without AVX2 must be checked again (SIGILL)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            return next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        return ""


def fingerprint(config: Path, files: list[str]) -> dict[str, object]:
    """What a passed check of ``config`` depended on, as it is now."""
    stats: dict[str, list[int] | None] = {}
    for name in files:
        try:
            st = os.stat(name)
            stats[name] = [st.st_size, st.st_mtime_ns]
        except OSError:
            stats[name] = None  # gone: never equal to a recorded stat
    try:
        text = config.read_bytes()
    except OSError:
        text = b""
    where = [os.environ.get(k, "") for k in ("HOME", "XDG_CACHE_HOME")]
    base = "\0".join([str(config.resolve()), sys.executable, sys.version, _cpu_flags(), *where])
    return {"config": hashlib.sha256(text).hexdigest(),
            "base": hashlib.sha256(base.encode()).hexdigest(), "files": stats}


def _cached(cache: Path, config: Path) -> bool:
    try:
        seen = json.loads(cache.read_text(encoding="utf-8"))
        return isinstance(seen, dict) and seen == fingerprint(config, list(seen["files"]))
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _remember(cache: Path, config: Path, stdout: str) -> None:
    files = [json.loads(line.removeprefix(DEPENDS)) for line in stdout.splitlines()
             if line.startswith(DEPENDS)]
    if not files:  # a remote provider: nothing that stays true is known
        return
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(fingerprint(config, files[0])), encoding="utf-8")
        tmp.replace(cache)
    except OSError:
        pass  # not remembered: the next run checks again


def check_model(config: Path, timeout: float = SMOKE_TIMEOUT, *,
                cache: Path | None = None) -> str | None:
    """Run the one-token smoke test for ``config``; ``None`` when the model answered.
    With ``cache``, a pass recorded there for the same inputs stands in for the run."""
    if cache is not None:
        if _cached(cache, config):
            return None
        cache.unlink(missing_ok=True)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "workers.smoke", "--config", str(config)],
            capture_output=True, text=True, timeout=timeout, check=False,
        )
    except subprocess.TimeoutExpired:
        return (
            f"the model did not answer a one-token test within {timeout:.0f}s; "
            + SWITCH.format(config=config)
        )
    if done.returncode == 0:
        if cache is not None:
            _remember(cache, config, done.stdout)
        return None
    return describe_smoke_exit(done.returncode, done.stderr, config)
