"""Every environment variable PyNanoClaw itself reads, in one place.

Secrets are not listed here: the config file *names* the variables that hold them
(``token_env``, ``api_key_env``), and only the process that needs a secret reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

#: path of the config file when ``--config`` is not given
CONFIG_ENV = "PYNANOCLAW_CONFIG"
#: overrides ``[redis] url`` (the supervisor sets it for its workers: the embedded server)
REDIS_URL_ENV = "PYNANOCLAW_REDIS_URL"
#: the outbox consumer name of this gateway (default: the host name)
GATEWAY_NAME_ENV = "PYNANOCLAW_GATEWAY_NAME"
#: onnxruntime threads of the local embedder (vector and hybrid memory) in a worker;
#: default 1: the bot shares its cores with the other workers and the gateway
EMBED_THREADS_ENV = "PNC_EMBED_THREADS"
#: where the config file is looked for when neither ``--config`` nor ``$PYNANOCLAW_CONFIG``
DEFAULT_CONFIG_PATH = Path("data/pynanoclaw.toml")

#: the model key variable a provider reads when ``model.api_key_env`` is left out
DEFAULT_KEY_ENVS: dict[str, str] = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
}

#: variables a worker process inherits from the gateway (besides the model key variable,
#: the Redis URL and the config path): what Python, locale and TLS need, and proxies.
#: Anything else, channel tokens above all, never reaches a worker.
WORKER_ENV_ALLOW = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "LANG", "LANGUAGE",
    "PYTHONPATH", "PYTHONHASHSEED", "PYTHONDONTWRITEBYTECODE", "PYTHONUNBUFFERED",
    "VIRTUAL_ENV", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
    "http_proxy", "https_proxy", "no_proxy", "all_proxy",
})
#: prefixes of allowed variables (locale categories: LC_ALL, LC_CTYPE, ...)
WORKER_ENV_ALLOW_PREFIXES = ("LC_",)
#: the whole environment of the embedded Redis server (plus ``LC_*``): it needs no
#: secret, and Valkey copies its environment into its heap (to rewrite its process
#: title), where an inherited token would sit readable in ``/proc/<pid>/mem``
REDIS_ENV_ALLOW = frozenset({"PATH", "HOME", "TZ", "LANG", "LANGUAGE"})


def embed_threads(env: Mapping[str, str]) -> int:
    """``$PNC_EMBED_THREADS`` as a count (default 1; 0: onnxruntime's choice);
    ``ValueError`` naming the variable when it is not a whole number."""
    value = env.get(EMBED_THREADS_ENV, "").strip() or "1"
    try:
        threads = int(value)
    except ValueError:
        raise ValueError(f"{EMBED_THREADS_ENV} must be a whole number of threads, "
                         f"not {value!r}") from None
    if threads < 0:  # 0: onnxruntime's own choice (every core)
        raise ValueError(f"{EMBED_THREADS_ENV} must not be negative, not {threads}")
    return threads
