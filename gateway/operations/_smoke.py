"""The model check run before a local chat opens: ``python -m workers.smoke`` in a
child process (the gateway never imports ``workers``, and a native crash in the model
library must not take this process with it).

``check_model`` returns ``None`` when the model answered, else the message to print:
what failed, and how to switch provider. A death by signal is named (SIGILL is a
llama.cpp built with instructions this CPU does not run).
"""

from __future__ import annotations

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


def smoke_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "workers.smoke", "--config", str(config)]


def describe_exit(returncode: int, stderr: str, config: Path) -> str:
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


def check_model(config: Path, timeout: float = SMOKE_TIMEOUT) -> str | None:
    """Run the one-token smoke test for ``config``; ``None`` when the model answered."""
    try:
        done = subprocess.run(
            smoke_command(config), capture_output=True, text=True, timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return (
            f"the model did not answer a one-token test within {timeout:.0f}s; "
            + SWITCH.format(config=config)
        )
    if done.returncode == 0:
        return None
    return describe_exit(done.returncode, done.stderr, config)
