"""``pynanoclaw init`` as a user runs it: in a real pseudo-terminal, answers typed; with
flags from a script. The live credential checks go to the local fake Bot API
(tests/fakes/telegram_api.py, python-telegram-bot unmodified); the model is local (no
network). No secret value may reach the file or anything the command prints."""

from __future__ import annotations

import asyncio
import os
import sys
import termios
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from gateway.config import load_config
from tests.fakes.telegram_api import BOT_TOKEN, FakeTelegram

ROOT = Path(__file__).resolve().parents[2]
#: nothing listens on port 1: no Ollama is found, whatever runs on this machine
NO_OLLAMA = "http://127.0.0.1:1"
WAIT = 60.0


def _env(**extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items()
            if k in ("PATH", "HOME", "LANG", "TMPDIR") or k.startswith("LC_")}
    return {**keep, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **extra}


def _argv(*args: str) -> list[str]:
    return [sys.executable, "-c", "from gateway.cli import main; main()", "init", *args]


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    fake = FakeTelegram()
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


@pytest.fixture
async def ollama() -> AsyncIterator[str]:
    """Ollama's model list (``GET /api/tags``, as its API docs show it) on a free port."""
    async def tags(_: web.Request) -> web.Response:
        return web.json_response({"models": [{"name": "llama3.2:latest",
                                              "model": "llama3.2:latest"}]})
    app = web.Application()
    app.router.add_get("/api/tags", tags)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


class Terminal:
    """The init command on the slave side of a pty (echo off, so the output is what the
    command printed and nothing the test typed)."""

    def __init__(self, proc: asyncio.subprocess.Process, master: int) -> None:
        self.proc, self.master, self.output, self.pos = proc, master, "", 0

    @classmethod
    async def start(cls, argv: list[str], env: dict[str, str], cwd: Path) -> Terminal:
        master, slave = os.openpty()
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~termios.ECHO
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        proc = await asyncio.create_subprocess_exec(*argv, stdin=slave, stdout=slave,
                                                    stderr=slave, env=env, cwd=cwd)
        os.close(slave)
        return cls(proc, master)

    async def _read(self) -> str:
        try:
            data = await asyncio.get_running_loop().run_in_executor(
                None, os.read, self.master, 4096)
        except OSError:  # EIO: the command exited and closed the terminal
            data = b""
        return data.decode(errors="replace")

    async def expect(self, text: str) -> None:
        async def until() -> int:
            while (at := self.output.find(text, self.pos)) < 0:
                chunk = await self._read()
                if not chunk:
                    raise AssertionError(f"exited before {text!r}:\n{self.output}")
                self.output += chunk
            return at
        self.pos = await asyncio.wait_for(until(), WAIT) + len(text)

    def type(self, answer: str) -> None:
        os.write(self.master, answer.encode() + b"\r")

    async def finish(self) -> int:
        async def drain() -> None:
            while chunk := await self._read():
                self.output += chunk
        await asyncio.wait_for(drain(), WAIT)
        code = await asyncio.wait_for(self.proc.wait(), WAIT)
        os.close(self.master)
        return code


async def _interview(tmp_path: Path, fake: FakeTelegram, token_answers: list[str],
                     *extra: str, ollama_url: str = NO_OLLAMA,
                     admins: tuple[str, ...] = ("telegram:42",)) -> tuple[int, str]:
    """Run init in a terminal answering: local model; local + telegram; the token
    variable (each of ``token_answers`` in turn); DM open; the admins (each of
    ``admins`` in turn)."""
    term = await Terminal.start(
        _argv("-o", "bot.toml", "--ollama-url", ollama_url,
              "--set", f"telegram.base_url={fake.base_url}", *extra),
        _env(TG_TOKEN=BOT_TOKEN), tmp_path)
    try:
        await term.expect("Model:")
        term.type("local")
        await term.expect("channels (comma-separated")
        term.type("local, telegram")
        for answer in token_answers:
            await term.expect("telegram: variable holding the bot token")
            term.type(answer)
        await term.expect("DM policy")
        term.type("open")
        await term.expect("/whoami")
        for answer in admins:
            await term.expect("admins (comma-separated")
            term.type(answer)
        return await term.finish(), term.output
    finally:
        if term.proc.returncode is None:
            term.proc.kill()
            await term.proc.wait()


async def test_init_in_a_terminal_writes_a_config_without_the_secret(
        tmp_path: Path, telegram: FakeTelegram, ollama: str) -> None:
    code, output = await _interview(tmp_path, telegram, ["TG_TOKEN"], ollama_url=ollama,
                                    admins=("42", "telegram:42"))
    assert code == 0, output
    assert "'42' is not of the form 'channel:id'" in output  # asked again
    # Ollama answered on its port: said, and offered as the default model
    assert f"Ollama answers at {ollama} (1 model(s) pulled)" in output
    assert "[local/anthropic/openai/compatible] [compatible]:" in output
    written = tmp_path / "bot.toml"
    text = written.read_text()
    cfg = load_config(written)
    assert cfg.model.provider == "local"
    assert cfg.channels["telegram"]["token_env"] == "TG_TOKEN"
    assert "local" in cfg.channels
    assert cfg.policy.dm == "open" and cfg.policy.admins == ["telegram:42"]
    assert "ok   channel telegram:default: accepted" in output  # checked live on the fake
    assert any(call[0] == "getMe" for call in telegram.calls)
    assert BOT_TOKEN not in text and BOT_TOKEN not in output
    assert text.startswith("# PyNanoClaw config written by `pynanoclaw init`")


async def test_init_refuses_a_pasted_token_and_asks_again(
        tmp_path: Path, telegram: FakeTelegram) -> None:
    code, output = await _interview(tmp_path, telegram, [BOT_TOKEN, "TG_TOKEN"],
                                    "--no-check")
    assert code == 0, output
    assert "[local/anthropic/openai/compatible] [local]:" in output  # no Ollama there
    assert "refused: that looks like a secret" in output
    text = (tmp_path / "bot.toml").read_text()
    assert load_config(tmp_path / "bot.toml").channels["telegram"]["token_env"] == "TG_TOKEN"
    assert BOT_TOKEN not in text and BOT_TOKEN not in output
    assert telegram.calls == []  # --no-check: nothing asked of the platform


async def _script(tmp_path: Path, *args: str, **env: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *_argv(*args), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT, env=_env(**env), cwd=tmp_path)
    out, _ = await asyncio.wait_for(proc.communicate(), WAIT)
    return await proc.wait(), out.decode()


async def test_init_from_flags_and_a_failed_check_is_reported(
        tmp_path: Path, telegram: FakeTelegram) -> None:
    wrong = "7000000001:AAwrong-wrong-wrong-wrong-wrong-wr"
    flags = ("--channel", "telegram", "--channel", "discord",
             "--token-env", "telegram=TG_TOKEN", "--token-env", "discord=DISCORD_UNSET",
             "--set", f"telegram.base_url={telegram.base_url}",
             "--dm", "allowlist", "--admin", "telegram:42", "--admin", "discord:7",
             "--model", "anthropic", "--token-env", "model=ANTHROPIC_UNSET",
             "--output", "conf/bot.toml", "--yes")
    code, output = await _script(tmp_path, *flags, TG_TOKEN=wrong)
    assert code == 0, output
    # each failure on its own line, the setup went on and wrote the file
    assert "FAIL channel telegram:default: credentials refused" in output
    assert "FAIL channel discord: " in output and "DISCORD_UNSET" in output
    # the model's smoke test names the unset key variable, before any request
    assert "FAIL model: model.api_key_env: environment variable ANTHROPIC_UNSET is not " \
        "set" in output
    assert "3 check(s) failed" in output
    written = tmp_path / "conf" / "bot.toml"
    cfg = load_config(written)
    assert (cfg.model.provider, cfg.model.api_key_env) == ("anthropic", "ANTHROPIC_UNSET")
    assert cfg.channels["discord"]["token_env"] == "DISCORD_UNSET"
    assert cfg.policy.dm == "allowlist" and cfg.policy.admins == ["telegram:42", "discord:7"]
    assert wrong not in output and wrong not in written.read_text()
    before = written.read_text()
    # an existing file is kept unless --force; a token given as a variable is refused
    code, output = await _script(tmp_path, *flags, "--no-check", TG_TOKEN=wrong)
    assert code == 2 and "exists" in output and written.read_text() == before
    code, output = await _script(tmp_path, "--token-env", f"telegram={BOT_TOKEN}",
                                 "--output", "other.toml", "--yes", "--no-check")
    assert code == 2 and "looks like a secret" in output and BOT_TOKEN not in output
    code, output = await _script(tmp_path, "--channel", "telegram",
                                 "--set", f"telegram.token={BOT_TOKEN}",
                                 "--output", "other.toml", "--yes", "--no-check")
    assert code == 2 and "a secret never goes in the file" in output
    assert BOT_TOKEN not in output
    assert not (tmp_path / "other.toml").exists()
