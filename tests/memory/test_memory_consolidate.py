"""consolidate() and reflect() on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from memory_store import BaseMemory


async def _fact(mem: BaseMemory, text: str, **meta: Any) -> str:
    return await mem.write(text, kind=meta.pop("kind", "fact"), metadata=meta)


async def _live_ids(mem: BaseMemory, query: str) -> set[str]:
    return {h.id for h in await mem.search(query, k=50)}


async def test_duplicates_are_merged_into_the_most_trusted(mem: BaseMemory) -> None:
    low = await _fact(mem, "Ann likes green tea.", trust=0.6, source="telegram:1:msg/1")
    high = await _fact(mem, "ann likes GREEN tea", trust=0.9, source="telegram:1:msg/2")
    near_a = await _fact(mem, "Remember that the quarterly sales report for the northern "
                              "region is due on Friday afternoon", trust=0.7)
    near_b = await _fact(mem, "Please remember that the quarterly sales report for the "
                              "northern region is due on Friday afternoon.", trust=0.7)
    other = await _fact(mem, "Ann dislikes coffee.", trust=0.5)
    changed = await mem.consolidate()
    assert changed == 4  # two superseded, two survivors annotated
    assert (await mem.read(low)).metadata["superseded_by"] == high
    survivor = await mem.read(high)
    assert survivor.valid_to is None
    assert survivor.metadata["merged_from"] == [low]
    assert survivor.metadata["also_from"] == ["telegram:1:msg/1"]
    assert {near_a, near_b} & await _live_ids(mem, "quarterly report") != {near_a, near_b}
    assert other in await _live_ids(mem, "Ann coffee")
    # Nothing is deleted: every file is still there, superseded ones findable on request.
    assert len(list(mem.group.memory_files())) == 5
    everything = await mem.search("green tea", k=50, filters={"include_superseded": True})
    assert {low, high} <= {h.id for h in everything}
    assert await mem.consolidate() == 0


async def test_contradicted_facts_are_superseded_not_deleted(mem: BaseMemory) -> None:
    old = await _fact(mem, "Bob lives in Paris.", created="2024-01-01T00:00:00Z", trust=0.8)
    new = await _fact(mem, "Bob lives in Berlin.", created="2024-06-01T00:00:00Z", trust=0.8)
    assert await mem.consolidate() == 1
    rec = await mem.read(old)
    assert rec.valid_to is not None
    assert rec.metadata["superseded_by"] == new
    assert rec.metadata["superseded_reason"] == "contradicted"
    assert old not in await _live_ids(mem, "Where does Bob live? Paris")
    assert await mem.consolidate() == 0


async def test_less_trusted_contradiction_is_flagged_not_applied(mem: BaseMemory) -> None:
    old = await _fact(mem, "Carol works at Acme.", created="2024-01-01T00:00:00Z", trust=0.9)
    new = await _fact(mem, "Carol works at Globex.", created="2024-06-01T00:00:00Z", trust=0.3)
    assert await mem.consolidate() == 1
    assert (await mem.read(old)).valid_to is None
    assert "disputed" in (await mem.read(new)).tags
    assert await mem.consolidate() == 0


async def test_entity_facts_fold_into_one_file(mem: BaseMemory) -> None:
    ids = [
        await _fact(mem, "Alice prefers morning meetings.", kind="entity", entity="Alice",
                    created="2024-01-01T00:00:00Z", source="slack:C1:msg/1", trust=0.9),
        await _fact(mem, "Alice lives in Oslo.", kind="entity", entity="Alice",
                    created="2024-01-02T00:00:00Z", source="slack:C1:msg/2"),
        await _fact(mem, "Alice has a cat named Miso.", kind="entity", entity="alice",
                    created="2024-01-03T00:00:00Z", source="slack:C1:msg/3", trust=0.4),
    ]
    await _fact(mem, "Dan plays chess.", kind="entity", entity="Dan")
    changed = await mem.consolidate()
    assert changed == 6  # two entity files + four folded facts
    alice = await mem.read("entity-alice")
    assert alice.kind == "entity"
    assert (mem.group.path / "entities" / "entity-alice.md").exists()
    for line in ("Alice prefers morning meetings.", "Alice lives in Oslo.", "Miso"):
        assert line in alice.content
    assert "slack:C1:msg/2" in alice.content
    # Folding never raises trust: the file is as trusted as its weakest fact.
    assert alice.trust == pytest.approx(0.4)
    assert "trust 0.40" in alice.content and "trust 0.90" in alice.content
    for mid in ids:
        assert (await mem.read(mid)).metadata["superseded_by"] == "entity-alice"
    hits = await mem.search("Alice cat Oslo", k=3)
    assert hits[0].id == "entity-alice"
    assert await mem.consolidate() == 0

    # A person adds a note above the facts; a new fact contradicts an old one.
    path = mem.group.path / "entities" / "entity-alice.md"
    path.write_text(path.read_text().replace("# Alice\n", "# Alice\n\nOur designer.\n"))
    await _fact(mem, "Alice lives in Rome.", kind="entity", entity="Alice",
                created="2024-05-01T00:00:00Z")
    assert await mem.consolidate() >= 2
    alice = await mem.read("entity-alice")
    assert "Our designer." in alice.content
    live, _, superseded = alice.content.partition("### Superseded")
    assert "Alice lives in Rome." in live
    assert "Alice lives in Oslo." not in live
    assert "Alice lives in Oslo." in superseded
    assert await mem.consolidate() == 0


async def test_episodes_are_never_consolidated(mem: BaseMemory) -> None:
    await mem.write("hello there", kind="episode", metadata={"id": "t1"})
    await mem.write("hello there", kind="episode", metadata={"id": "t2"})
    assert await mem.consolidate() == 0
    assert {h.id for h in await mem.search("hello", k=5)} == {"t1", "t2"}


async def test_reflect_stores_a_lesson_once(mem: BaseMemory) -> None:
    calls: list[dict[str, Any]] = []

    async def summarizer(ctx: dict[str, Any]) -> str | None:
        calls.append(ctx)
        if ctx.get("error") is None:
            return None
        return "  Check the  timezone before   scheduling reminders. "

    mem.summarizer = summarizer
    assert await mem.reflect({"task": "small talk"}) is None
    assert list((mem.group.path / "reflections").iterdir()) == []
    ctx = {"task": "schedule", "error": "reminder fired 1h early", "turn_id": "t9"}
    rid = await mem.reflect(ctx)
    assert rid is not None
    rec = await mem.read(rid)
    assert rec.kind == "reflection"
    assert rec.content == "Check the timezone before scheduling reminders."
    assert await mem.reflect(ctx) == rid
    assert await mem.reflect({**ctx, "turn_id": "t10"}) == rid  # same lesson, kept once
    assert len(list((mem.group.path / "reflections").iterdir())) == 1
    assert len(calls) == 4


async def test_reflect_default_rule_and_bad_summarizer(mem: BaseMemory) -> None:
    assert await mem.reflect({"task": "answer"}) is None
    rid = await mem.reflect({"task": "sending a file", "error": "the file was too large",
                             "fix": "compress it first"})
    assert rid is not None
    assert (await mem.read(rid)).content == (
        "When sending a file: the file was too large. Next time: compress it first.")
    mem.summarizer = lambda ctx: 42  # type: ignore[assignment,return-value]
    with pytest.raises(TypeError):
        await mem.reflect({"error": "x"})


async def test_reconcile_is_limited_to_its_entities_and_never_lets_less_trust_win(
    mem: BaseMemory,
) -> None:
    from memory_store.maintenance import reconcile_facts

    home = await _fact(mem, "Dan lives in Rome", kind="entity", entity="Dan", trust=0.8,
                       created="2024-01-01T00:00:00Z")
    moved = await _fact(mem, "Dan relocated to Oslo", kind="entity", entity="Dan", trust=0.8,
                        created="2024-06-01T00:00:00Z")
    rumour = await _fact(mem, "Dan relocated to Mars", kind="entity", entity="Dan",
                         trust=0.2, created="2024-07-01T00:00:00Z")
    eve = await _fact(mem, "Eve likes tea", kind="entity", entity="Eve", trust=0.5)
    other = await _fact(mem, "Eve works at Acme", kind="entity", entity="Eve", trust=0.5)
    dup_a = await _fact(mem, "Fay likes jazz", trust=0.5)
    dup_b = await _fact(mem, "fay likes jazz!", trust=0.5)
    # a claimed replacement of another entity's fact, and of a more trusted one
    changed = reconcile_facts(mem, ["Dan"], [(home, moved), (moved, rumour), (other, moved)])
    assert changed > 0
    rec = await mem.read(home)  # no attribute in common: replaced only because told so
    assert rec.metadata["superseded_by"] == moved
    assert rec.metadata["superseded_reason"] == "contradicted"
    assert (await mem.read(moved)).metadata.get("superseded_reason") == "folded"
    assert "disputed" in (await mem.read(rumour)).tags
    dan = await mem.read("entity-dan")
    live = dan.content.partition("### Superseded")[0]
    assert "Dan relocated to Oslo" in live and "Dan lives in Rome" not in live
    # Eve and the duplicates were not its business
    for untouched in (eve, other, dup_a, dup_b):
        assert (await mem.read(untouched)).valid_to is None
    assert reconcile_facts(mem, ["Dan"], [(home, moved)]) == 0
