"""Read one required secret from the environment, as ``SecretStr`` (kept out of reprs
and logs); a missing or blank one is a clear error naming the variable to set."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import SecretStr

__all__ = ["read_secret"]


def read_secret(env: Mapping[str, str], name: str, why: str) -> SecretStr:
    """``env[name]`` stripped; ``ValueError`` ("set NAME in the environment: why") when
    it is missing or blank."""
    value = env.get(name, "").strip()
    if not value:
        raise ValueError(f"set {name} in the environment: {why}")
    return SecretStr(value)
