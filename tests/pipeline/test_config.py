"""Configuration: validation messages, and the CLI printing them without a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.config import ConfigError, load_config, parse_config
from tests.pipeline.conftest import ROOT


def test_defaults_and_relative_data_dir(tmp_path: Path) -> None:
    cfg_path = tmp_path / "conf" / "pnc.toml"
    cfg_path.parent.mkdir()
    cfg_path.write_text('data_dir = "state"\n[channels.local]\n[worker]\njob_timeout = 42\n'
                        '[queue]\nworkers = 3\n[model]\nprovider = "local"\n')
    cfg = load_config(cfg_path, env={})
    assert cfg.data_dir == (tmp_path / "conf" / "state").resolve()
    assert cfg.redis.url == "" and cfg.policy.dm == "open" and cfg.engage.default == "mention"
    assert cfg.worker.job_timeout == 42 and cfg.queue.workers == 3
    assert cfg.channels == {"local": {}}


def test_env_overrides_redis_url(tmp_path: Path) -> None:
    p = tmp_path / "c.toml"
    p.write_text('[redis]\nurl = "redis://a:1"\n')
    assert load_config(p, env={"PYNANOCLAW_REDIS_URL": "redis://b:2"}).redis.url == "redis://b:2"


@pytest.mark.parametrize(("doc", "needle"), [
    ({"policy": {"dm": "opne"}}, "policy.dm"),
    ({"policy": {"allow": ["no-colon"]}}, "policy.allow"),
    ({"engage": {"default": "sometimes"}}, "engage.default"),
    ({"groups": {"nocolon": {"engage": "always"}}}, "groups"),
    ({"groups": {"telegram:1": {"engag": "always"}}}, "groups.telegram:1.engag"),
    ({"queue": {"lease_ttl": -1}}, "queue.lease_ttl"),
    ({"redis": {"url": "http://x"}}, "redis.url"),
    ({"worker": {"job_timeout": "soon"}}, "worker.job_timeout"),
    ({"channels": {"local": 3}}, "channels.local"),
])
def test_errors_name_the_key(doc: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(doc, env={})
    assert needle in str(info.value)


def test_redis_url_with_password_is_not_echoed() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"redis": {"url": "http://user:hunter2@host"}}, env={})
    assert "hunter2" not in str(info.value)


BAD = {
    "bad_value.toml": ('[policy]\ndm = "opne"\n[channels.local]\n', "policy.dm"),
    "bad_toml.toml": ("data_dir = \n", "not valid TOML"),
    "unknown_channel.toml": ("[channels.icq]\n", "channels.icq"),
    "bad_channel_block.toml": ("[channels.local]\nmax_message_len = 5\n",
                               "channels.local.max_message_len"),
}


@pytest.mark.parametrize("name", sorted(BAD))
@pytest.mark.parametrize("command", ["gateway", "run"])
def test_cli_prints_the_key_without_a_traceback(tmp_path: Path, name: str, command: str) -> None:
    text, needle = BAD[name]
    path = tmp_path / name
    path.write_text(f'data_dir = "{tmp_path / "data"}"\n' + text if "data_dir" not in text
                    else text)
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", command, "--config", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_cli_missing_config_file(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "send", "--config",
                           str(tmp_path / "nope.toml"), "--chat", "a", "--user", "b", "hi"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "config file not found" in proc.stderr and "Traceback" not in proc.stderr


def test_adapters_are_built_from_their_blocks_and_errors_name_the_key() -> None:
    from gateway.app import build_channels

    env = {"TELEGRAM_BOT_TOKEN": "123:abc"}
    chans = build_channels(parse_config({"channels": {"telegram": {}, "local": {}}}, env={}),
                           env, redis_url="redis://127.0.0.1:1")
    assert sorted(chans) == [("local", "default"), ("telegram", "default")]
    with pytest.raises(ConfigError) as info:
        build_channels(parse_config({"channels": {"telegram": {"tokn_env": "X"}}}, env={}), env)
    assert "channels.telegram.tokn_env" in str(info.value)
    with pytest.raises(ConfigError) as info:
        build_channels(parse_config({"channels": {"telegram": {}}}, env={}), {})
    assert "TELEGRAM_BOT_TOKEN" in str(info.value)
    assert str(info.value).count("channels.telegram") == 1
    with pytest.raises(ConfigError) as info:
        build_channels(parse_config({}, env={}), env)
    assert "[channels.local]" in str(info.value)


def test_the_example_config_is_valid_for_gateway_and_workers() -> None:
    from gateway.config import load_worker_settings

    path = ROOT / "deploy" / "pynanoclaw.example.toml"
    cfg = load_config(path, env={})
    assert "local" in cfg.channels and cfg.redis.url == ""
    assert load_worker_settings(path, env={}).model.provider == "local"


def test_run_stops_with_the_workers_config_error(tmp_path: Path) -> None:
    path = tmp_path / "pnc.toml"
    path.write_text('data_dir = "data"\n[model]\nprovider = "anthropic"\n'
                    'api_key_env = "PNC_TEST_UNSET_KEY"\n[channels.local]\n')
    env = {k: v for k, v in __import__("os").environ.items() if k != "PNC_TEST_UNSET_KEY"}
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "run", "--config", str(path),
                           "--log-level", "WARNING"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert "model.api_key_env" in proc.stderr and "PNC_TEST_UNSET_KEY" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("identities", "error"), [
    ({"Ada": {"members": ["telegram:42"]}}, "identity name 'Ada' must be lowercase"),
    ({"linked-x": {"members": ["telegram:42"]}}, "not starting with 'linked-'"),
    ({"ada": {"members": ["telegram42"]}},
     "identities.ada.members: 'telegram42' is not a user key 'channel:sender_id'"),
    ({"ada": {"members": []}}, "identities.ada.members: list should have at least 1 item"),
    ({"ada": {"members": ["telegram:42"], "share": True}},
     "identities.ada.share: unknown key 'share' in [identities.ada]; known keys: members"),
    ({"ada": {"members": ["telegram:42"]}, "bo": {"members": ["telegram:42"]}},
     "'telegram:42' is a member of both [identities.ada] and [identities.bo]"),
])
def test_identity_errors_name_the_key(identities: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"identities": identities}, env={})
    assert error in str(err.value)


def test_identities_map_user_keys_to_people() -> None:
    c = parse_config({"identities": {"ada": {"members": ["telegram:42", "slack:U0123"]}}},
                     env={})
    assert c.person_of("slack:U0123") == "ada" and c.person_of("slack:U9") is None


def test_embed_threads_is_read_by_the_config_layer() -> None:
    from gateway.config.env import EMBED_THREADS_ENV, embed_threads

    assert embed_threads({}) == 1
    assert embed_threads({EMBED_THREADS_ENV: " 3 "}) == 3
    with pytest.raises(ValueError, match=EMBED_THREADS_ENV):
        embed_threads({EMBED_THREADS_ENV: "many"})
