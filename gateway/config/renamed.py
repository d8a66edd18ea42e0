"""Config keys that were renamed, and the error an old config gets for each.

The operator's TOML file is never rewritten for them (it is theirs, and may be under
version control or generated): a config that still uses an old name fails to load with
a line naming the old key and the new one, as every other config error names its key.
"""

from __future__ import annotations

#: old dotted key -> new dotted key (the commit that renamed it in the comment)
RENAMED: dict[str, str] = {
    # 5734992: the pipeline's process and retry knobs moved from [worker] to [queue]
    "worker.processes": "queue.workers",
    "worker.retries": "queue.retries",
}


def renamed_error(key: str) -> str | None:
    """The error line for dotted ``key`` if it is an old name, else None."""
    new = RENAMED.get(key)
    if new is None:
        return None
    section, _, leaf = new.rpartition(".")
    where = f"under [{section}]" if section else "at the top level"
    return (f"{key}: renamed to {new}; write it as {leaf} = ... {where} (your config file "
            "is never rewritten for you)")
