"""Keep the process's SIGINT/SIGTERM handlers across a native library that replaces them.

xllamacpp's server installs its own SIGINT and SIGTERM handlers (``sigaction``) when it
starts, as llama.cpp's command-line server does. In a worker that would swallow the
SIGTERM RQ uses for a warm shutdown (and Ctrl-C in ``pynanoclaw chat``): the signal
would stop the model's loop instead of the process. The model starts on a worker thread,
where Python's ``signal.signal`` cannot be called, so the handlers are saved and put
back at the C level, which is process-wide and allowed from any thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import signal
from collections.abc import Iterator
from contextlib import contextmanager

#: Larger than ``struct sigaction`` on every Linux libc (152 bytes on glibc x86-64 and
#: arm64): the saved bytes are handed back unread, so only the size matters.
_SIGACTION_BYTES = 512
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def keep_signal_handlers() -> Iterator[None]:
    """Whatever the body does to SIGINT's and SIGTERM's handlers is undone on exit."""
    libc_name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(libc_name, use_errno=True) if libc_name else None
    if libc is None:  # no C library to ask (not Linux/glibc-like): nothing to keep
        yield
        return
    saved: dict[int, ctypes.Array[ctypes.c_char]] = {}
    for sig in _SIGNALS:
        old = ctypes.create_string_buffer(_SIGACTION_BYTES)
        if libc.sigaction(int(sig), None, old) == 0:
            saved[int(sig)] = old
    try:
        yield
    finally:
        for sig, old in saved.items():
            libc.sigaction(sig, old, None)
