"""The quickstart's second run, timed: ``deploy/quickstart.sh`` with one line piped in.

    python -m bench.second_run TREE [TREE ...] [--rounds 2] [--text "Hello, who are you?"]

Each TREE is a checkout whose quickstart already ran once (its ``.venv`` and ``data/``
exist). Before the first round each tree's ``data/`` is copied aside, and before every run
it is put back (the group memory and Valkey data of that first run, the remembered model
check), so every run answers the same prompt with the same history. Runs alternate
between the trees (ABAB...), so the machine's load moves all of them alike.

Reported per run: seconds to the first reply line on stdout and to the script's exit,
the CPU seconds of the script and every process it waited for
(``getrusage(RUSAGE_CHILDREN)``: the work, steadier than the wall time on a shared
machine), ``/proc/loadavg``'s one-minute figure before and after, and the reply.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Run:
    tree: Path
    reply_s: float
    exit_s: float
    cpu_s: float
    load_before: float
    load_after: float
    reply: str
    status: int


def _load() -> float:
    return float(Path("/proc/loadavg").read_text(encoding="ascii").split()[0])


def _cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _restore(tree: Path) -> None:
    data, saved = tree / "data", tree / ".bench-data"
    if not saved.exists():
        shutil.copytree(data, saved, symlinks=True)
    shutil.rmtree(data)
    shutil.copytree(saved, data, symlinks=True)


def time_run(tree: Path, text: str) -> Run:
    _restore(tree)
    load_before, cpu_before = _load(), _cpu()
    start = time.monotonic()
    proc = subprocess.Popen(["bash", "deploy/quickstart.sh"], cwd=tree, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(text + "\n")
    proc.stdin.close()
    reply, reply_s = "", float("nan")
    for line in proc.stdout:
        if line.strip() and not reply:
            reply, reply_s = line.strip(), time.monotonic() - start
    status = proc.wait()
    exit_s = time.monotonic() - start
    return Run(tree, reply_s, exit_s, _cpu() - cpu_before, load_before, _load(), reply,
               status)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--text", default="Hello, who are you?")
    args = parser.parse_args()
    print("| round | tree | first reply, s | exit, s | CPU, s | load before -> after |")
    print("|---|---|---|---|---|---|")
    for rnd in range(args.rounds):
        for tree in args.trees:
            run = time_run(tree.resolve(), args.text)
            print(f"| {rnd} | {tree} | {run.reply_s:.1f} | {run.exit_s:.1f} | "
                  f"{run.cpu_s:.1f} | {run.load_before:.2f} -> {run.load_after:.2f} |"
                  + ("" if run.status == 0 else f" exit {run.status}"), flush=True)
            print(f"<!-- reply: {run.reply[:120]} -->", flush=True)


if __name__ == "__main__":
    main()
