"""``pynanoclaw init``: the setup that asks. In a terminal it asks for the model, the
channels, the NAME of each token's variable (a pasted token is refused), the DM policy
and the admins; with flags (``--yes``, or stdin not a terminal) it asks nothing.

It validates the file with ``load_config`` before writing it, checks each credential
live (``gateway/operations/_init_checks.py``: a failure is reported, the setup goes on), and writes
atomically (temp file, fsync, rename), never over an existing file unless told to.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from gateway.config import PolicyConfig
from gateway.config.env import DEFAULT_KEY_ENVS
from gateway.operations._cliparts import config_file, fail, load
from gateway.operations._init_toml import (
    CHANNELS,
    DM_CHOICES,
    MODEL_CHOICES,
    OLLAMA_URL,
    Answers,
    name_problem,
    render,
)

#: keys of a channel block that hold a secret when they do not end in ``_env``
_SECRET_WORDS = ("token", "secret", "password", "key")


def init_command(
    model: Annotated[str | None, typer.Option(
        help="local | anthropic | openai | an OpenAI-compatible URL (Ollama: "
             "http://127.0.0.1:11434/v1)", show_default=False)] = None,
    model_name: Annotated[str, typer.Option(help="the model's name (default: the "
                                            "provider's)")] = "",
    channel: Annotated[list[str] | None, typer.Option(
        help=f"a channel to add (repeat): {', '.join(CHANNELS)}", show_default=False)] = None,
    token_env: Annotated[list[str] | None, typer.Option(
        help="NAME=VAR: the variable holding a secret (repeat); NAME is a channel "
             "(telegram), a channel key (slack.app_token_env) or model",
        show_default=False)] = None,
    setting: Annotated[list[str] | None, typer.Option(
        "--set", help="CHANNEL.KEY=VALUE: a plain channel setting (repeat), e.g. "
                      "signal.number=+15551234567", show_default=False)] = None,
    dm: Annotated[str | None, typer.Option(help="DM policy: pairing | allowlist | open",
                                           show_default=False)] = None,
    admin: Annotated[list[str] | None, typer.Option(
        help='an admin\'s user key "channel:id" (repeat); /whoami tells yours',
        show_default=False)] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="where to write [default: $PYNANOCLAW_CONFIG or "
                               "data/pynanoclaw.toml]", show_default=False)] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="ask nothing: flags and "
                                      "defaults")] = False,
    force: Annotated[bool, typer.Option(help="overwrite an existing file")] = False,
    no_check: Annotated[bool, typer.Option("--no-check", help="skip the live credential "
                                           "checks")] = False,
    ollama_url: Annotated[str, typer.Option(help="where to look for Ollama")] = OLLAMA_URL,
) -> None:
    """Write a config file by asking (or from flags); check its credentials live."""
    ask = sys.stdin.isatty() and not yes
    path = config_file(output)
    if path.exists() and not force and not (
            ask and typer.confirm(f"{path} exists; overwrite it?", default=False)):
        raise fail(f"{path} exists; keep it, or pass --force (or --output PATH)")
    envs = _pairs(token_env or [], "--token-env")
    for key, var in envs.items():
        if (problem := name_problem(var)) is not None:
            raise fail(f"--token-env {key}=...: {problem}")
    answers = Answers()
    _ask_model(answers, model, model_name, envs.get("model", ""), ask, ollama_url)
    names = channel or (_ask_channels() if ask else ["local"])
    sets = _pairs(setting or [], "--set")
    stray = sorted({k.partition(".")[0] for k in [*envs, *sets]} - {*names, "model"})
    if stray:
        raise fail(f"--token-env/--set name {', '.join(stray)}, not among the channels "
                   "(add --channel)")
    for name in names:
        answers.channels[name] = _ask_channel(name, envs, sets, ask)
    answers.dm = dm or (_choose("DM policy: pairing (a stranger's first DM gets a code "
                                "you approve), allowlist, or open", DM_CHOICES, "pairing")
                        if ask else "pairing")
    if admin is None and ask:
        typer.echo("Admins are user keys like telegram:42. To learn yours, start the bot "
                   "and send it /whoami in a DM; you can add it to [policy] admins later.")
        admin = _ask_admins()
    answers.admins = admin or []
    _write(path, render(answers), check=not no_check)


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise fail(f"{flag} takes KEY=VALUE, got {item.split('=')[0]!r}=...")
        out[key.strip()] = value.strip()
    return out


def _choose(question: str, choices: tuple[str, ...], default: str) -> str:
    while True:
        answer = str(typer.prompt(f"{question} [{'/'.join(choices)}]", default=default))
        if answer.strip() in choices:
            return answer.strip()
        typer.echo(f"  please answer one of: {', '.join(choices)}")


def _ask_list(what: str, hint: str, default: str) -> list[str]:
    text = str(typer.prompt(f"{what} (comma-separated: {hint})", default=default))
    return [t.strip() for t in text.split(",") if t.strip()]


def _ask_channels() -> list[str]:
    while True:
        names = _ask_list("channels", ", ".join(CHANNELS), "local")
        unknown = [n for n in names if n not in CHANNELS]
        if names and not unknown:
            return names
        typer.echo(f"  unknown: {', '.join(unknown) or '(none given)'}; choose from "
                   f"{', '.join(CHANNELS)}")


def _ask_admins() -> list[str]:
    """User keys, checked by ``[policy]``'s own validation and asked again if wrong."""
    while True:
        admins = _ask_list("admins", "channel:id", "")
        try:
            PolicyConfig(admins=admins)
            return admins
        except ValidationError as err:
            typer.echo(f"  {err.errors()[0]['msg'].removeprefix('Value error, ')}")


def _ask_var(question: str, default: str) -> str:
    """A variable NAME, asked until it is one (a pasted token is refused, not echoed)."""
    while True:
        answer = str(typer.prompt(f"{question} (the variable's NAME)", default=default))
        problem = name_problem(answer)
        if problem is None:
            return answer.strip()
        typer.echo(f"  refused: {problem}")


def _ask_model(a: Answers, model: str | None, name: str, key_env: str, ask: bool,
               ollama_url: str) -> None:
    from gateway.operations._init_checks import ollama_models

    found = ollama_models(ollama_url) if ask and model is None else None
    if found is not None:
        typer.echo(f"Ollama answers at {ollama_url} ({len(found)} model(s) pulled).")
    choice = model or (_choose("Model: local (try-out, on this machine), anthropic, "
                               "openai, or compatible (an OpenAI-compatible URL such as "
                               "Ollama)", MODEL_CHOICES,
                               "compatible" if found else "local") if ask else "local")
    if choice.startswith(("http://", "https://")):
        a.provider, a.base_url = "compatible", choice
    elif choice in MODEL_CHOICES:
        a.provider = choice
    else:
        raise fail(f"--model {choice!r}: use local, anthropic, openai or an http(s) URL")
    if a.provider == "compatible" and not a.base_url:
        a.base_url = (str(typer.prompt("its URL", default=ollama_url + "/v1")) if ask
                      else ollama_url + "/v1")
    if a.provider != "local":
        default_name = (found[0] if found and a.provider == "compatible" else "")
        a.model_name = name or (str(typer.prompt("model name (empty: the provider's "
                                                  "default)", default=default_name))
                                if ask else default_name)
    if a.provider in ("anthropic", "openai"):
        default = DEFAULT_KEY_ENVS[a.provider]
        a.key_env = key_env or (_ask_var("variable holding the API key", default) if ask
                                else default)
    elif a.provider == "compatible":
        a.key_env = key_env  # most local servers need no key


def _ask_channel(name: str, envs: dict[str, str], sets: dict[str, str],
                 ask: bool) -> dict[str, str]:
    if name not in CHANNELS:
        raise fail(f"--channel {name!r}: choose from {', '.join(CHANNELS)}")
    block: dict[str, str] = {}
    for item in CHANNELS[name]:
        given = (envs.get(f"{name}.{item.key}") or (envs.get(name) if item.env else None)
                 or sets.get(f"{name}.{item.key}"))
        if given:
            block[item.key] = given
        elif ask:
            block[item.key] = (_ask_var(f"{name}: {item.question}", item.default)
                               if item.env else
                               str(typer.prompt(f"{name}: {item.question}",
                                                default=item.default or None)))
        elif item.default:
            block[item.key] = item.default
        else:
            raise fail(f"channels.{name}.{item.key}: pass --set {name}.{item.key}=VALUE")
    for key, value in sets.items():  # any other plain setting the flags give
        chan, _, sub = key.partition(".")
        if chan != name or not sub:
            continue
        if sub.endswith("_env") and (problem := name_problem(value)) is not None:
            raise fail(f"--set {key}=...: {problem}")
        if not sub.endswith("_env") and any(w in sub for w in _SECRET_WORDS):
            raise fail(f"--set {key}=...: a secret never goes in the file; export it "
                       f"and name its variable with --token-env {name}.{sub}_env=VAR")
        block.setdefault(sub, value)
    for key, var in envs.items():  # a variable for a key the questions do not cover
        chan, _, sub = key.partition(".")
        if chan == name and sub.endswith("_env"):
            block.setdefault(sub, var)
    return block


def _write(path: Path, text: str, *, check: bool) -> None:
    """Validate ``text`` as the config at ``path``, check it live, then rename it in."""
    from gateway.operations._init_checks import live_checks

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.init-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        _, cfg = load(tmp)
        failed = 0
        if check:
            for line in live_checks(tmp, cfg):
                failed += not line.ok
                typer.echo(line.line())
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    typer.echo(f"wrote {path}")
    if failed:
        typer.echo(f"{failed} check(s) failed (above): the file is written; fix them, "
                   f"then run `pynanoclaw status --config {path}`")
    typer.echo(f"next: pynanoclaw run --config {path}")


__all__ = ["init_command"]
