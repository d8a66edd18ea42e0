"""What ``pynanoclaw init`` knows and writes: the questions each channel block needs,
the test that a variable NAME is not a pasted secret, and the commented TOML.

Pure functions, no terminal and no network (``gateway/operations/_init_cli.py`` asks,
``gateway/operations/_init_checks.py`` checks). The TOML never holds a secret: a block carries the
NAMES of the variables (``*_env`` keys) and plain settings (an address, a URL).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

#: Ollama's own default address (its docs: ``OLLAMA_HOST`` defaults to 127.0.0.1:11434)
OLLAMA_URL = "http://127.0.0.1:11434"
MODEL_CHOICES = ("local", "anthropic", "openai", "compatible")
DM_CHOICES = ("pairing", "allowlist", "open")
#: a variable name as shells write them: upper case, digits, underscores
_VAR_NAME = re.compile(r"[A-Z_][A-Z0-9_]{0,63}")
#: well-known token prefixes (Slack xoxb-/xapp-, OpenAI/Anthropic sk-, Meta EAA, GitHub)
_TOKEN_PREFIXES = ("xox", "xapp-", "sk-", "sk_", "EAA", "ghp_", "github_pat_", "syt_")


@dataclass(frozen=True)
class Ask:
    """One key of a channel block: ``env`` keys hold a variable NAME, others a value."""

    key: str
    question: str
    default: str = ""
    env: bool = False


#: each channel's block: what README's channel sections say it needs (the rest defaults)
CHANNELS: dict[str, tuple[Ask, ...]] = {
    "local": (),
    "telegram": (Ask("token_env", "variable holding the bot token from @BotFather",
                     "TELEGRAM_BOT_TOKEN", env=True),),
    "slack": (Ask("bot_token_env", "variable holding the bot token (xoxb-)",
                  "SLACK_BOT_TOKEN", env=True),
              Ask("app_token_env", "variable holding the app-level token (xapp-, Socket "
                  "Mode)", "SLACK_APP_TOKEN", env=True)),
    "discord": (Ask("token_env", "variable holding the bot token", "DISCORD_BOT_TOKEN",
                    env=True),),
    "whatsapp": (Ask("phone_number_id", "WhatsApp Cloud API phone number id (digits)"),
                 Ask("token_env", "variable holding the access token", "WHATSAPP_TOKEN",
                     env=True),
                 Ask("app_secret_env", "variable holding the app secret",
                     "WHATSAPP_APP_SECRET", env=True),
                 Ask("verify_token_env", "variable holding the webhook verify token",
                     "WHATSAPP_VERIFY_TOKEN", env=True)),
    "signal": (Ask("number", "the account's phone number (+15551234567)"),
               Ask("url", "signal-cli daemon URL", "http://127.0.0.1:8080")),
    "email": (Ask("address", "the bot's email address"),
              Ask("password_env", "variable holding the app password", "EMAIL_PASSWORD",
                  env=True)),
    "matrix": (Ask("homeserver", "homeserver URL (https://matrix.example.org)"),
               Ask("user_id", "the bot's user id (@claw:example.org)"),
               Ask("access_token_env", "variable holding the access token",
                   "MATRIX_ACCESS_TOKEN", env=True)),
}


@dataclass
class Answers:
    """Everything the file is written from."""

    provider: str = "local"          # one of MODEL_CHOICES
    model_name: str = ""
    base_url: str = ""
    key_env: str = ""
    channels: dict[str, dict[str, str]] = field(default_factory=dict)
    dm: str = "pairing"
    admins: list[str] = field(default_factory=list)


def name_problem(text: str, env: Mapping[str, str] | None = None) -> str | None:
    """Why ``text`` cannot be a variable NAME (``None`` when it can). A value that looks
    like a token is refused as such; the message never repeats it."""
    env = os.environ if env is None else env
    value = text.strip()
    secretish = (value.startswith(_TOKEN_PREFIXES) or (len(value) >= 16 and any(
        v == value for v in env.values())) or len(value) > 64
        or (len(value) >= 20 and any(c.islower() for c in value)
            and any(c.isdigit() for c in value)))
    if secretish:
        return ("that looks like a secret, not a variable name: never paste the token "
                "here; export it (export MY_TOKEN=...) and type the variable's NAME")
    if not _VAR_NAME.fullmatch(value):
        return ("a variable name is upper-case letters, digits and underscores "
                "(like TELEGRAM_BOT_TOKEN)")
    return None


def _str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def _list(values: list[str]) -> str:
    return "[" + ", ".join(_str(v) for v in values) + "]"


def _model(a: Answers) -> list[str]:
    lines = ["[model]                        # read by the workers"]
    if a.provider == "local":
        lines.append('provider = "local"             # the try-out model, on this machine')
        return lines
    provider = "openai" if a.provider == "compatible" else a.provider
    lines.append(f"provider = {_str(provider)}")
    if a.model_name:
        lines.append(f"name = {_str(a.model_name)}")
    if a.base_url:
        lines.append(f"base_url = {_str(a.base_url)}   # an OpenAI-compatible server")
    if a.key_env:
        lines.append(f"api_key_env = {_str(a.key_env)}   # the NAME of the variable "
                     "holding the key")
    return lines


def _channels(a: Answers) -> list[str]:
    lines: list[str] = []
    for name, block in a.channels.items():
        note = ("  # talk to the bot with `pynanoclaw chat` / `send`" if name == "local"
                else "  # README: the channel's section")
        lines += ["", f"[channels.{name}]{note}"]
        for key, value in block.items():
            why = "   # a variable NAME: the secret stays in the env" \
                if key.endswith("_env") else ""
            lines.append(f"{key} = {_str(value)}{why}")
    return lines


def render(a: Answers) -> str:
    """The commented TOML for ``a`` (relative paths resolve from the file's directory)."""
    lines = [
        "# PyNanoClaw config written by `pynanoclaw init`; every option is in",
        "# deploy/pynanoclaw.example.toml. Secrets are not in this file: it names the",
        "# environment variables that hold them. Check it with `pynanoclaw status`.",
        "",
        'data_dir = "."                 # <data_dir>/groups/<channel>/<chat>/ is each '
        "group's memory",
        "",
        "[redis]",
        'url = ""                       # empty: an embedded Valkey under <data_dir>/redis',
        "",
        *_model(a),
        "",
        "[memory]",
        'backend = "file"               # file | vector | hybrid',
        "",
        "[policy]",
        f"dm = {_str(a.dm)}" + "  # open | allowlist | pairing (a stranger's first DM gets "
        "a code: `pynanoclaw pair approve CODE`)",
        'groups = "open"                # open | allowlist',
        "allow = []                     # group/user keys allowed (\"telegram:-100123\")",
        f"admins = {_list(a.admins)}   # operators (\"telegram:42\"); send /whoami to the "
        "bot to learn yours",
        "",
        "[engage]",
        'default = "mention"            # mention | trigger | always',
        'trigger_words = ["claw"]',
        *_channels(a),
    ]
    return "\n".join(lines) + "\n"
