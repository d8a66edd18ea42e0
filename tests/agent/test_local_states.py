"""The local model's prompt states kept across processes (workers/local_states.py), with
the real llama.cpp and the bundled GGUF, each "worker" a process of its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from workers.local_states import KEEP, states_dir

from .test_local_model import needs_local

ROOT = Path(__file__).resolve().parents[2]
RULES = "You are a helpful assistant in a chat. Reply briefly. " * 12
#: one process: a LocalChat (as the worker builds it) answers each chat given; prints
#: llama.cpp's timings of each answer
ASK = """
import json, sys
from pathlib import Path
from workers.local_model import LocalChat, find_gguf
state = Path(sys.argv[1]) if sys.argv[1] != "-" else None
chat = LocalChat(find_gguf(""), max_tokens=4, state_dir=state)
for chats in json.loads(sys.argv[2]):
    chat.complete(chats)
    print(json.dumps(chat.last_timings))
"""


def ask(state: Path | None, *chats: list[dict[str, str]]) -> list[dict[str, float]]:
    out = subprocess.run(
        [sys.executable, "-c", ASK, str(state) if state else "-", json.dumps(chats)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def chat_of(memory: str, question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": f"{RULES}\n\nNotes from memory:\n{memory}"},
            {"role": "user", "content": question}]


@needs_local
def test_a_new_process_reuses_the_saved_prompt_of_the_last(tmp_path: Path) -> None:
    state = states_dir(tmp_path)
    first = chat_of("- Ana likes tea.", "Ana: Hello, who are you?")
    again = chat_of("- Ana likes tea.", "Ana: What does Ana like?")
    [cold] = ask(state, first)
    assert cold["cache_n"] == 0
    [warm] = ask(state, again)  # a new process: its slot starts empty
    assert warm["cache_n"] >= 0.8 * cold["prompt_n"]  # the system text and more
    assert warm["prompt_n"] < 0.2 * cold["prompt_n"]
    [nothing_kept] = ask(None, again)  # without a state directory: all read again
    assert nothing_kept["cache_n"] == 0


@needs_local
def test_another_chats_state_gives_only_the_start_both_share(tmp_path: Path) -> None:
    state = states_dir(tmp_path)
    mine = chat_of("- Ana likes tea.\n- Ana lives in Porto.", "Ana: Where do I live?")
    other = chat_of("- Bo plays chess.\n- Bo lives in Oslo.", "Bo: Where do I live?")
    [mine_alone] = ask(None, mine)
    ask(state, other)  # another chat's turn was the last
    [mine_after] = ask(state, mine)
    # reused: the rules both begin with; read anew: all from the first different token
    assert 0 < mine_after["cache_n"] < mine_alone["prompt_n"]
    assert mine_after["cache_n"] + mine_after["prompt_n"] == mine_alone["prompt_n"]


@needs_local
def test_at_most_keep_states_stay_and_each_is_whole(tmp_path: Path) -> None:
    state = states_dir(tmp_path)
    ask(state, *(chat_of(f"- fact {i}", f"Ana: question {i}?") for i in range(KEEP + 2)))
    [model_dir] = state.iterdir()
    saved = sorted(p.name for p in model_dir.iterdir())
    assert len([n for n in saved if n.endswith(".json")]) == KEEP
    assert len([n for n in saved if n.endswith(".bin")]) == KEEP
    assert not [n for n in saved if n.startswith(".")]  # no half-written file left
