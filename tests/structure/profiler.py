"""Records which project files' code runs, in this process and its threads.

``python -m tests.structure.profiler <module> [args...]`` runs ``<module>`` as
``__main__`` (like ``python -m``) under the recorder, for a child process (a worker).
SIGUSR1 starts a fresh window (forget what ran so far: start-up and imports); SIGUSR2
writes the files seen since to ``$PNC_TRACE_OUT`` (one path per line).
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from tests.structure.rules import PACKAGES, ROOT

_PREFIXES = tuple(str(ROOT / pkg) + os.sep for pkg in PACKAGES)


class Recorder:
    """``sys.setprofile`` hook keeping the set of project files with a function call."""

    def __init__(self) -> None:
        self.files: set[str] = set()
        self._seen_codes: set[int] = set()

    def _hook(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        code = frame.f_code
        key = id(code)
        if key in self._seen_codes:
            return
        self._seen_codes.add(key)
        if code.co_filename.startswith(_PREFIXES):
            self.files.add(str(Path(code.co_filename).relative_to(ROOT)))

    def start(self) -> None:
        threading.setprofile(self._hook)
        sys.setprofile(self._hook)

    def reset(self) -> None:
        self.files = set()
        self._seen_codes = set()

    def stop(self) -> set[str]:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
        return set(self.files)


def main() -> None:
    recorder = Recorder()
    out = os.environ["PNC_TRACE_OUT"]

    def dump(*_: object) -> None:
        Path(out).write_text("\n".join(sorted(recorder.files)) + "\n", encoding="utf-8")

    signal.signal(signal.SIGUSR1, lambda *_: recorder.reset())
    signal.signal(signal.SIGUSR2, dump)
    module, sys.argv = sys.argv[1], sys.argv[1:]
    recorder.start()
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
