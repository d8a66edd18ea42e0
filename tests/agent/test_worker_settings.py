"""gateway.config as a worker reads it: the model key, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.config import ConfigError, load_worker_settings

from .conftest import SECRET


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pynanoclaw.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_local_model_file_memory(tmp_path: Path) -> None:
    s = load_worker_settings(write(tmp_path, ""), env={})
    assert s.model.provider == "local"
    assert s.model.api_key is None
    assert s.memory.backend == "file"
    assert s.worker.job_timeout == 300
    # Relative data_dir is relative to the config file, as in the gateway.
    assert s.data_dir == (tmp_path / "data").resolve()


def test_full_config_with_gateway_sections_ignored(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
data_dir = "state"
[redis]
url = "redis://127.0.0.1:6399/0"
[model]
provider = "anthropic"
name = "claude-sonnet-4-5"
api_key_env = "MY_KEY"
temperature = 0.2
max_tokens = 800
[memory]
backend = "hybrid"
[worker]
job_timeout = 60
[policy]
dm = "open"
admins = ["telegram:42"]
[engage]
default = "mention"
[channels.telegram]
token_env = "TELEGRAM_BOT_TOKEN"
""",
    )
    s = load_worker_settings(path, env={"MY_KEY": SECRET})
    assert s.data_dir == (tmp_path / "state").resolve()
    assert s.redis.url == "redis://127.0.0.1:6399/0"
    assert (s.model.provider, s.model.name, s.model.max_tokens) == (
        "anthropic",
        "claude-sonnet-4-5",
        800,
    )
    assert s.model.api_key is not None
    assert s.model.api_key.get_secret_value() == SECRET
    assert s.memory.backend == "hybrid"
    assert s.worker.job_timeout == 60
    assert s.admins == frozenset({"telegram:42"})


def test_provider_typo_names_key_and_choices(tmp_path: Path) -> None:
    path = write(tmp_path, '[model]\nprovider = "antropic"\n')
    with pytest.raises(ConfigError) as err:
        load_worker_settings(path, env={})
    assert str(err.value) == (
        "model.provider: 'antropic' is not one of local, anthropic, openai, function"
    )


def test_backend_typo_names_key(tmp_path: Path) -> None:
    path = write(tmp_path, '[memory]\nbackend = "vectors"\n')
    with pytest.raises(ConfigError, match=r"memory\.backend: 'vectors' is not one of file, "):
        load_worker_settings(path, env={})


def test_missing_key_env_names_the_variable(tmp_path: Path) -> None:
    path = write(tmp_path, '[model]\nprovider = "anthropic"\napi_key_env = "ANTHROPIC_API_KEY"\n')
    with pytest.raises(ConfigError) as err:
        load_worker_settings(path, env={"OTHER": "x"})
    assert str(err.value).startswith(
        "model.api_key_env: environment variable ANTHROPIC_API_KEY is not set"
    )


def test_anthropic_defaults_to_its_standard_env_var(tmp_path: Path) -> None:
    path = write(tmp_path, '[model]\nprovider = "anthropic"\n')
    s = load_worker_settings(path, env={"ANTHROPIC_API_KEY": SECRET})
    assert s.model.api_key_env == "ANTHROPIC_API_KEY"
    assert s.model.name == "claude-sonnet-4-5"


def test_key_pasted_into_api_key_env_is_rejected_without_echo(tmp_path: Path) -> None:
    path = write(tmp_path, f'[model]\nprovider = "openai"\napi_key_env = "{SECRET}"\n')
    with pytest.raises(ConfigError) as err:
        load_worker_settings(path, env={})
    assert "model.api_key_env: must be the NAME" in str(err.value)
    assert SECRET not in str(err.value)
    assert SECRET[:12] not in repr(err.value)


def test_key_written_in_the_file_is_rejected_without_echo(tmp_path: Path) -> None:
    path = write(tmp_path, f'[model]\nprovider = "openai"\napi_key = "{SECRET}"\n')
    with pytest.raises(ConfigError) as err:
        load_worker_settings(path, env={})
    assert str(err.value).startswith("model.api_key: keys do not go in the config file")
    assert SECRET not in str(err.value)


def test_bad_value_errors_do_not_echo_input(tmp_path: Path) -> None:
    # A secret typed into a numeric field must not be printed back.
    path = write(tmp_path, f'[model]\nmax_tokens = "{SECRET}"\n')
    with pytest.raises(ConfigError) as err:
        load_worker_settings(path, env={})
    assert str(err.value).startswith("model.max_tokens: ")
    assert SECRET not in str(err.value)


def test_unknown_key_in_owned_section_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, '[model]\nprovder = "local"\n')
    with pytest.raises(ConfigError) as err:
        load_worker_settings(path, env={})
    message = str(err.value)
    assert message.startswith("model.provder: unknown key 'provder' in [model]")
    assert "provider" in message and "api_key," not in message


def test_openai_compatible_endpoint_needs_no_key_but_a_name(tmp_path: Path) -> None:
    ok = write(
        tmp_path,
        '[model]\nprovider = "openai"\nbase_url = "http://127.0.0.1:11434/v1"\nname = "llama3.2"\n',
    )
    s = load_worker_settings(ok, env={})
    assert s.model.api_key is None
    nameless = write(tmp_path, '[model]\nprovider = "openai"\nbase_url = "http://127.0.0.1:1/v1"\n')
    with pytest.raises(ConfigError, match=r"^model\.name: required with model\.base_url"):
        load_worker_settings(nameless, env={})


def test_openai_without_base_url_requires_key(tmp_path: Path) -> None:
    path = write(tmp_path, '[model]\nprovider = "openai"\n')
    with pytest.raises(ConfigError, match="environment variable OPENAI_API_KEY is not set"):
        load_worker_settings(path, env={})


def test_bad_base_url_and_function_path(tmp_path: Path) -> None:
    bad_url = write(tmp_path, '[model]\nprovider = "openai"\nbase_url = "localhost:8000"\n')
    with pytest.raises(ConfigError, match=r"^model\.base_url: 'localhost:8000' must start"):
        load_worker_settings(bad_url, env={})
    bad_fn = write(tmp_path, '[model]\nprovider = "function"\nfunction = "tests.agent.x"\n')
    with pytest.raises(ConfigError, match=r"^model\.function: 'tests\.agent\.x' is not an import"):
        load_worker_settings(bad_fn, env={})


def test_redis_url_scheme_and_env_override(tmp_path: Path) -> None:
    bad = write(tmp_path, '[redis]\nurl = "http://127.0.0.1:6379"\n')
    with pytest.raises(ConfigError, match=r"^redis\.url: must start with redis://"):
        load_worker_settings(bad, env={})
    s = load_worker_settings(bad, env={"PYNANOCLAW_REDIS_URL": "redis://127.0.0.1:7000/1"})
    assert s.redis.url == "redis://127.0.0.1:7000/1"


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found: pass --config PATH or set PYNANOCLAW_CONFIG"):
        load_worker_settings(tmp_path / "nope.toml", env={})
    broken = write(tmp_path, "[model\nprovider = 1\n")
    with pytest.raises(ConfigError, match=r"pynanoclaw\.toml: not valid TOML"):
        load_worker_settings(broken, env={})
    table = write(tmp_path, 'model = "anthropic"\n')
    with pytest.raises(ConfigError, match=r"^model: must be a table"):
        load_worker_settings(table, env={})


def test_config_path_from_env(tmp_path: Path) -> None:
    path = write(tmp_path, "[worker]\njob_timeout = 42\n")
    s = load_worker_settings(None, env={"PYNANOCLAW_CONFIG": str(path)})
    assert s.worker.job_timeout == 42
    assert s.source == path


def test_key_never_in_repr_str_or_dump(tmp_path: Path) -> None:
    path = write(tmp_path, '[model]\nprovider = "anthropic"\n')
    s = load_worker_settings(path, env={"ANTHROPIC_API_KEY": SECRET})
    for text in (repr(s), str(s), repr(s.model), s.model_dump_json(), str(s.model_dump())):
        assert SECRET not in text
