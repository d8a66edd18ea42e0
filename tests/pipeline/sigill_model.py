"""A "model" module whose import dies with SIGILL, as a llama.cpp built for another CPU
does (``[model] provider = "function"``, ``function =
"tests.pipeline.sigill_model:model"``). Only ever imported in a child process."""

from __future__ import annotations

import os
import signal

os.kill(os.getpid(), signal.SIGILL)
