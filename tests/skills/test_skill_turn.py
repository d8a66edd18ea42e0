"""End to end: an operator drops a skill folder while a worker runs, and the next turn
lists it, reads it through ``read_skill`` and follows it, with no restart; the group's
skill of a name wins over the global one."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.config import load_config
from memory_store.files import global_skills_dir, group_dir
from tests.pipeline.conftest import Stack, Valkey


def drop_skill(root: Path, name: str, description: str, token: str) -> None:
    """What an operator does: a folder with a SKILL.md (and a reference file)."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(
        f"---\nname: {name}\ndescription: {description}\nwhen_to_use: someone says hi\n---\n"
        f"Greet back and say {token}.\n", encoding="utf-8")
    (folder / "phrases.md").write_text("hello, hi\n", encoding="utf-8")


async def test_a_skill_dropped_between_turns_is_listed_and_read_by_the_next(
        tmp_path: Path, valkey: Valkey) -> None:
    stack = Stack(tmp_path, valkey)
    text = stack.config_path.read_text()
    stack.config_path.write_text(text.replace("tests.pipeline.scripted:model",
                                              "tests.skills.skill_model:model"))
    stack.config = load_config(stack.config_path)
    data = stack.config.data_dir
    drop_skill(global_skills_dir(data), "greet", "the operator's greeting", "TOKEN-global")
    try:
        stack.start_workers(1)
        await stack.start_gateway()
        first = await stack.ask("ada", "ada", "hi", timeout=60)
        assert first.reply == "greet says TOKEN-global"
        # mid-run: the same worker process, nothing restarted
        drop_skill(group_dir(data, "local:ada") / "skills", "greet", "this chat's greeting",
                   "TOKEN-group")
        second = await stack.ask("ada", "ada", "hi again", timeout=60)
        assert second.reply == "greet says TOKEN-group"
        turns = [json.loads(x) for x in stack.r.lrange("test:skills:turns", 0, -1)]
        assert len(turns) == 2 and turns[0]["pid"] == turns[1]["pid"]
        assert "read_skill" in turns[0]["offered"]
        assert "the operator's greeting" in turns[0]["instructions"]
        assert "this chat's greeting" in turns[1]["instructions"]
        assert "the operator's greeting" not in turns[1]["instructions"]
        # the skill came back as the operator's text, escaped, naming its source
        returns = [x.decode() for x in stack.r.lrange("test:skills:returns", 0, -1)]
        assert returns[1].startswith('<skill_file skill="greet" file="SKILL.md" '
                                     'source="operator skill (group): greet/SKILL.md" '
                                     'trust="0.90">\nGreet back and say TOKEN-group.')
        assert "phrases.md" in returns[1]
        # another chat still has the global one
        bob = await stack.ask("bob", "bob", "hi", timeout=60)
        assert bob.reply == "greet says TOKEN-global"
    finally:
        await stack.close()
