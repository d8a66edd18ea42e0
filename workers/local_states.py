"""The local model's state after recent prompts, kept on disk, so that a new worker
process (every start of the quickstart) or a turn of another chat in between does not
read the whole prompt again.

On two cores the prompt is most of a local turn (``workers.local_model``): llama.cpp
keeps the state of the last prompt in its one slot and reuses the part a new prompt
shares with it, but a new process starts empty. Here, after each answer, the slot is
saved (llama.cpp's ``/slots`` save action, a few milliseconds) with the chat text it was
made from; before a request the saved state sharing the longest start with the new
chat is restored into the slot if it shares more than the slot already holds. llama.cpp
then reuses only the tokens both prompts begin with, and computes the rest: the
attention state of a token depends only on the tokens before it, so a state restored
from another chat's prompt adds nothing of that chat to this one's answer (chunks after
a difference are never reused: ``n_cache_reuse`` stays 0 in ``workers.local_model``).

The files hold prompts, so memory's words: ``drop_states`` removes them all whenever a
redaction runs (``workers.redaction``: a deletion, an edit or a ``/forget``), and they
are a cache, safe to delete at any time. At most ``KEEP`` states are kept per model.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["KEEP", "PromptStates", "drop_states", "states_dir"]

log = logging.getLogger(__name__)

#: Saved states per model, the most recently used kept: about 20 KB per prompt token
#: for SmolLM2-135M (8 MB for a 384-token prompt and its reply).
KEEP = 8
#: A saved state is restored only if it shares this many more characters with the new
#: chat than the slot already does (about 20 tokens): restoring costs a file read.
MIN_GAIN = 64
_TIMEOUT = 10.0


def states_dir(data_dir: Path) -> Path:
    """Where the workers keep the local model's saved prompt states."""
    return data_dir / "model-state"


def drop_states(data_dir: Path) -> None:
    """Every saved prompt state of every model gone (a redaction ran)."""
    shutil.rmtree(states_dir(data_dir), ignore_errors=True)


def _shared(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))  # noqa: RUF071 (texts, not paths)


class PromptStates:
    """The saved states of one model (``directory``, llama.cpp's ``slot_save_path``),
    read and written through the in-process server's loopback ``address``."""

    def __init__(self, directory: Path, address: str, api_key: str) -> None:
        if not address.startswith("http://"):
            raise ValueError(f"not the local model's listener: {address!r}")
        self.directory = directory
        self._address = address
        self._key = api_key
        self.held = ""  # the chat text whose state is in the slot now

    def _slot(self, action: str, filename: str) -> bool:
        request = urllib.request.Request(  # noqa: S310 (llama.cpp's own http:// listener)
            f"{self._address}/slots/0?action={action}",
            data=json.dumps({"filename": filename}).encode(),
            headers={"Authorization": f"Bearer {self._key}",
                     "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT) as response:  # noqa: S310
                body: dict[str, Any] = json.loads(response.read())
        except (OSError, urllib.error.URLError, ValueError) as exc:
            # a cache: a failed save or restore (disk full, a file of an older
            # llama.cpp) costs one full prompt, never the turn
            log.debug("local model: slot %s of %s failed: %r", action, filename, exc)
            return False
        return "error" not in body

    def _texts(self) -> list[tuple[Path, str]]:
        found = []
        for meta in self.directory.glob("*.json"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                found.append((meta, str(json.loads(meta.read_text("utf-8"))["chat"])))
        return found

    def restore_for(self, text: str) -> int:
        """Restores the saved state that starts most like ``text`` if it beats the slot's
        own by ``MIN_GAIN`` characters; the characters the slot now shares with it."""
        have = _shared(self.held, text)
        better = [(shared, meta, saved) for meta, saved in self._texts()
                  if (shared := _shared(saved, text)) >= have + MIN_GAIN]
        if not better:
            return have
        shared, meta, saved = max(better, key=lambda b: b[0])
        if self._slot("restore", meta.with_suffix(".bin").name):
            self.held = saved
            with contextlib.suppress(OSError):
                meta.touch()  # most recently used
            return shared
        self.held = ""  # a failed restore may have left the slot half-written
        return 0

    def save(self, text: str) -> None:
        """The slot's state (``text`` and the answer to it) saved, then the oldest
        states beyond ``KEEP`` removed. Written under a temporary name and renamed, so
        another worker process never restores a half-written file."""
        self.held = text
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.debug("local model: no state directory: %r", exc)
            return
        name = hashlib.sha256(text.encode()).hexdigest()[:24]
        partial = f".{name}.{os.getpid()}.part"
        if not self._slot("save", partial):
            with contextlib.suppress(OSError):
                (self.directory / partial).unlink()
            return
        try:
            meta = self.directory / f".{name}.{os.getpid()}.meta"
            meta.write_text(json.dumps({"chat": text}), encoding="utf-8")
            os.replace(self.directory / partial, self.directory / f"{name}.bin")
            os.replace(meta, self.directory / f"{name}.json")
        except OSError as exc:
            log.debug("local model: state not kept: %r", exc)
            return
        self._prune()

    def _prune(self) -> None:
        def used(p: Path) -> float:
            try:
                return p.stat().st_mtime
            except OSError:
                return 0.0

        states = sorted(self.directory.glob("*.json"), key=used, reverse=True)
        if not states:
            return  # a redaction emptied the directory meanwhile
        stale = [p for p in self.directory.glob(".*") if used(p) < used(states[0]) - 3600]
        old = [p for meta in states[KEEP:] for p in (meta, meta.with_suffix(".bin"))]
        for path in [*stale, *old]:
            with contextlib.suppress(OSError):
                path.unlink()  # the oldest states, and what a killed worker left half-written
