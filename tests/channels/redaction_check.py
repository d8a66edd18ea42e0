"""What a channel's end-to-end deletion test checks: once the redaction job ran, none of
the deleted message's words is in any file under the data directory (memory, index,
audit log) nor in any Redis key (its serialized bytes: a stream's listpacks as they are).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import redis

#: bound on the wait for the redaction job (a worker process runs it)
WAIT = 90.0


def redacted(data_dir: Path) -> bool:
    """Whether some group's audit log records a redaction."""
    for log in data_dir.rglob("audit.jsonl"):
        for line in log.read_text(encoding="utf-8").splitlines():
            if line.strip() and json.loads(line).get("op") == "redact":
                return True
    return False


async def wait_redacted(data_dir: Path) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + WAIT
    while not redacted(data_dir):
        assert loop.time() < deadline, "the deletion was never redacted"
        await asyncio.sleep(0.1)


def files_holding(root: Path, word: str) -> list[str]:
    """Every file under ``root`` whose bytes hold ``word``, in any case."""
    needle = word.lower().encode()
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")
                  if p.is_file() and needle in p.read_bytes().lower())


def keys_holding(valkey_url: str, word: str) -> set[str]:
    """Every Redis key whose ``DUMP`` holds ``word``, in any case (the server is told
    not to compress what it serializes, so the bytes are plain)."""
    needle = word.lower().encode()
    with redis.Redis.from_url(valkey_url) as r:
        r.config_set("rdbcompression", "no")
        return {k.decode() for k in r.scan_iter(count=1000)
                if needle in (r.dump(k) or b"").lower()}
