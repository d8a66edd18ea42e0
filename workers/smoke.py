"""``python -m workers.smoke``: does the configured model answer at all?

Run before a chat opens (``pynanoclaw chat`` starts it in a child process, so a
native crash such as SIGILL from a llama.cpp built for another CPU is seen as an exit
signal, not as a dead chat). For ``provider = "local"`` it loads the weights and
generates one token; for the other providers it checks the configuration only (a
network request belongs to ``status``). Exit 0 and one line on success; exit 1 and a
message naming what failed and how to switch provider otherwise.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from gateway.config import (
    CONFIG_ENV,
    CommandExit,
    ConfigError,
    Settings,
    load_worker_settings,
)

SWITCH_HINT = (
    'to use another model, set [model] provider = "anthropic" (and export '
    'ANTHROPIC_API_KEY) or provider = "openai" (OPENAI_API_KEY, or base_url for an '
    "OpenAI-compatible server such as Ollama) in {config}; see README, Choosing the model"
)


def smoke(settings: Settings) -> str:
    """One line describing the model that answered; raises on any failure."""
    if settings.model.provider != "local":
        from workers.agent import build_model

        build_model(settings.model)
        return f"model: {settings.model.provider} {settings.model.name} configured"
    from workers.local_model import LocalChat, find_gguf

    engine = LocalChat(find_gguf(settings.model.name), max_tokens=1, temperature=0.0)
    engine.complete([{"role": "user", "content": "Hi"}])
    # what this pass depended on, for gateway.operations._smoke's cache: the weights, and the code
    # that chose and ran them (ours and llama.cpp's, its native library included)
    files = {str(engine.model_path.resolve())}
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if name.split(".")[0] in ("xllamacpp", "workers") and where:
            files.add(str(Path(where).resolve()))
    return (f"model: local {engine.model_path.name} answered\n"
            f"{DEPENDS}{json.dumps(sorted(files))}")


#: the line after a local model's answer: the files the pass depended on (a JSON list),
#: which ``gateway.operations._smoke`` (that never imports ``workers``) reads under the same name
DEPENDS = "depends: "

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


@app.command(help=__doc__)
def main(config: Annotated[Path | None, typer.Option(
        help=f"config file (default: ${CONFIG_ENV})")] = None) -> None:
    raise typer.Exit(check(config))


def check(path: Path | None) -> int:
    """Run the smoke test on the config at ``path``; the exit status."""
    config = str(path or os.environ.get(CONFIG_ENV) or "the config file")
    try:
        settings = load_worker_settings(path)
        print(smoke(settings), flush=True)
    except ConfigError as err:
        print(f"error: {err}\n{SWITCH_HINT.format(config=config)}", file=sys.stderr)
        return CommandExit.FAILED
    except Exception as err:
        # any failure of the model library itself: the user needs its words, not ours
        print(
            f"error: the model did not answer a one-token test: {type(err).__name__}: {err}"
            f"\n{SWITCH_HINT.format(config=config)}",
            file=sys.stderr,
        )
        return CommandExit.FAILED
    return 0


if __name__ == "__main__":
    app(prog_name="python -m workers.smoke")
