"""Lessons from corrections (issue 25): the extraction step flags, by message id, the
messages that corrected the bot; each becomes a lesson at its author's trust that the
next similar request finds. With a scripted model this shows the mechanics: the lesson
reaches the next attempt's prompt. Whether a real model then answers better, and how
well a real model recognizes corrections, a scripted model cannot show."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from . import extract_model
from . import test_extraction as extraction
from .conftest import ROOT
from .test_extraction import Env, say, turn

#: the extraction tests' fixture: a real Valkey, the drain job, an in-process RQ worker
env = extraction.env

LESSON = "The Zephyr standup is on Tuesday, not Thursday: say Tuesday when asked."


@pytest.fixture(autouse=True)
def _fresh_script() -> Iterator[None]:
    extract_model.CORRECTIONS.clear()
    extract_model.PROMPTS.clear()
    yield
    extract_model.CORRECTIONS.clear()
    extract_model.PROMPTS.clear()


def _lessons(e: Env) -> list[tuple[str, str, float, tuple[str, ...]]]:
    with closing(e.memory()) as mem:
        return [(r.id, r.content, r.trust, r.tags) for r in mem.records({"kind": "reflection"})]


def test_a_correction_becomes_a_lesson_the_next_similar_request_sees(env: Env) -> None:
    say(env.r, "m1", "When is the Zephyr standup?")
    turn(env)
    extract_model.CORRECTIONS["m2"] = (LESSON, [])  # the model flags m2, by its id
    say(env.r, "m2", "You got the day of the Zephyr standup mixed up, I told you Tuesday")
    turn(env)
    [(lesson_id, text, trust, tags)] = _lessons(env)
    assert text == LESSON and trust == 0.5  # a member's words: member trust
    assert "correction" in tags
    with closing(env.memory()) as mem:
        rec = mem.read_sync(lesson_id)
    assert rec.source == "local:c1:msg/m2" and rec.metadata["lesson_from"] == "correction"
    say(env.r, "m3", "Remind me, when is the Zephyr standup this week?")
    turn(env)
    first, second = extract_model.PROMPTS[0], extract_model.PROMPTS[-1]
    assert LESSON not in first and LESSON in second


def test_a_members_correction_never_overrides_what_an_admin_set(env: Env) -> None:
    with closing(env.memory()) as mem:
        admin_fact = mem.write_sync("The Zephyr standup is on Monday", kind="entity",
                                    metadata={"id": "fact-admin", "source": "local:c1:msg/a1",
                                              "trust": 0.9, "entity": "Zephyr standup"})
    extract_model.CORRECTIONS["m5"] = ("The Zephyr standup is on Tuesday.", [admin_fact])
    say(env.r, "m5", "The bot is mistaken about the Zephyr standup day: Tuesday")
    turn(env)
    [(_, text, trust, tags)] = _lessons(env)
    assert trust == 0.5 and "disputed" in tags and "stands" in text
    with closing(env.memory()) as mem:
        kept = mem.read_sync(admin_fact)
    assert kept.valid_to is None and kept.content == "The Zephyr standup is on Monday"
    assert kept.trust == 0.9


def test_an_unknown_message_id_gives_no_lesson(env: Env) -> None:
    extract_model.CORRECTIONS["not-in-batch"] = (LESSON, [])
    extract_model.CORRECTIONS["m7"] = ("   ", [])
    say(env.r, "m7", "Anything new on the Zephyr standup?")
    turn(env)
    assert _lessons(env) == []


#: what a phrase list for spotting corrections would hold; none may exist in the code
_PHRASES = ("that's wrong", "thats wrong", "that is wrong", "you're wrong", "you are wrong",
            "i said", "i told you", "not what i said", "i meant", "wrong again", "no, it's",
            "not correct", "incorrect")


def test_no_list_of_correction_phrases_exists() -> None:
    found = []
    for package in ("workers", "memory_store"):
        for path in sorted(Path(ROOT, package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    low = node.value.lower().replace("\u2019", "'")
                    found += [(path.name, p) for p in _PHRASES if p in low]
    assert found == []
