"""The contract every Memory backend keeps; runs once per backend (see conftest)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from memory_helpers import GROUP, backend_options

from memory_store import BaseMemory, InvalidMemoryId, Memory, MemoryNotFound, open_memory
from memory_store.files import AuditLog


async def test_satisfies_the_protocol(mem: BaseMemory) -> None:
    assert isinstance(mem, Memory)


async def test_round_trip(mem: BaseMemory) -> None:
    created = datetime(2024, 5, 7, 13, 56, tzinfo=UTC)
    mid = await mem.write(
        "Caroline went to the LGBTQ support group yesterday.",
        kind="episode",
        metadata={"id": "turn-1", "source": "telegram:-100:msg/11,12", "trust": 0.8,
                  "created": created.isoformat(), "message_ids": [11, 12],
                  "participants": ["Caroline"], "tags": ["support"]},
    )
    assert mid == "turn-1"
    rec = await mem.read(mid)
    assert rec.content == "Caroline went to the LGBTQ support group yesterday."
    assert rec.kind == "episode"
    assert rec.source == "telegram:-100:msg/11,12"
    assert rec.trust == pytest.approx(0.8)
    assert rec.created == created
    assert rec.tags == ("support",)
    assert rec.metadata["message_ids"] == [11, 12]
    assert rec.metadata["participants"] == ["Caroline"]
    hits = await mem.search("support group Caroline", k=5)
    assert [h.id for h in hits][:1] == ["turn-1"]


async def test_generated_ids_are_unique_and_readable(mem: BaseMemory) -> None:
    a = await mem.write("first", kind="note", metadata={})
    b = await mem.write("first", kind="note", metadata={})
    assert a != b
    assert (await mem.read(a)).content == "first"


async def test_write_with_same_id_is_idempotent(mem: BaseMemory) -> None:
    meta = {"id": "telegram:-100:turn/7", "source": "telegram:-100:msg/7"}
    first = await mem.write("the turn", kind="episode", metadata=meta)
    again = await mem.write("the turn", kind="episode", metadata=meta)
    assert first == again == "telegram:-100:turn/7"
    assert len(list(mem.group.memory_files())) == 1
    hits = await mem.search("turn", k=10)
    assert [h.id for h in hits] == ["telegram:-100:turn/7"]
    ops = [e["op"] for e in AuditLog(mem.group.path).entries() if e["id"] == first]
    assert ops == ["write"]  # (the core templates' creation is audited too)


async def test_content_round_trips_markdown_and_front_matter_lookalikes(mem: BaseMemory) -> None:
    body = "---\nnot: front matter\n---\n# Title\n\n```py\nprint('x')\n```\nünïcødé ✓"
    mid = await mem.write(body, kind="procedure", metadata={})
    assert (await mem.read(mid)).content == body


async def test_update_changes_content_and_search(mem: BaseMemory) -> None:
    mid = await mem.write("The project deadline is in March.", kind="fact", metadata={})
    before = await mem.read(mid)
    await mem.update(mid, "The project deadline moved to October.")
    after = await mem.read(mid)
    assert after.content == "The project deadline moved to October."
    assert after.created == before.created
    assert after.updated >= before.updated
    hits = await mem.search("deadline October", k=3)
    assert hits and hits[0].id == mid
    assert hits[0].content.endswith("October.")
    entries = list(AuditLog(mem.group.path).entries())
    assert entries[-1]["op"] == "update"
    assert entries[-1]["old_hash"] == entries[-2]["new_hash"]
    assert entries[-1]["new_hash"] != entries[-1]["old_hash"]


async def test_delete_removes_file_and_hits(mem: BaseMemory) -> None:
    mid = await mem.write("Dave owns a red bicycle.", kind="fact", metadata={})
    keep = await mem.write("Erin owns a blue car.", kind="fact", metadata={})
    await mem.delete(mid)
    with pytest.raises(MemoryNotFound):
        await mem.read(mid)
    hits = await mem.search("red bicycle", k=10)
    assert mid not in [h.id for h in hits]
    assert (await mem.read(keep)).content == "Erin owns a blue car."
    assert [e["op"] for e in AuditLog(mem.group.path).entries()][-1] == "delete"
    with pytest.raises(MemoryNotFound):
        await mem.delete(mid)
    with pytest.raises(MemoryNotFound):
        await mem.update(mid, "x")


async def _seed_for_filters(mem: BaseMemory) -> dict[str, str]:
    now = datetime.now(UTC)
    ids = {}
    ids["old_ep"] = await mem.write("Picnic at the lake with Ann", kind="episode", metadata={
        "source": "telegram:-1:msg/1", "trust": 0.9, "created": "2023-01-10T10:00:00+00:00"})
    ids["new_ep"] = await mem.write("Picnic at the beach with Ann", kind="episode", metadata={
        "source": "slack:C1:msg/2", "trust": 0.4, "created": "2024-06-10T10:00:00+00:00"})
    ids["fact"] = await mem.write("Ann likes picnic food", kind="fact", metadata={
        "source": "telegram:-1:msg/3", "trust": 0.7, "created": "2024-01-01T00:00:00+00:00",
        "tags": ["ann", "food"]})
    ids["gone"] = await mem.write("Ann picnic plans were cancelled", kind="fact", metadata={
        "source": "telegram:-1:msg/4", "trust": 0.9,
        "valid_to": (now - timedelta(days=1)).isoformat()})
    return ids


async def test_filters(mem: BaseMemory) -> None:
    ids = await _seed_for_filters(mem)

    async def found(filters: dict[str, object]) -> set[str]:
        return {h.id for h in await mem.search("picnic Ann", k=10, filters=filters)}

    assert await found({}) == {ids["old_ep"], ids["new_ep"], ids["fact"]}
    assert await found({"kind": "episode"}) == {ids["old_ep"], ids["new_ep"]}
    assert await found({"kind": ["fact"]}) == {ids["fact"]}
    assert await found({"since": "2024-01-01T00:00:00Z"}) == {ids["new_ep"], ids["fact"],
                                                               ids["gone"]} - {ids["gone"]}
    assert await found({"until": datetime(2023, 12, 31, tzinfo=UTC)}) == {ids["old_ep"]}
    assert await found({"source": "telegram:-1"}) == {ids["old_ep"], ids["fact"]}
    assert await found({"source": "telegram:-"}) == {ids["old_ep"], ids["fact"]}
    assert await found({"source": "telegram:-1:msg/1"}) == {ids["old_ep"]}
    assert await found({"min_trust": 0.75}) == {ids["old_ep"]}
    assert await found({"tags": ["food"]}) == {ids["fact"]}
    assert await found({"include_superseded": True}) == set(ids.values())
    assert await found({"kind": "fact", "include_superseded": True, "min_trust": 0.8}) == {
        ids["gone"]}


async def test_superseded_is_relative_to_now(mem: BaseMemory) -> None:
    ids = await _seed_for_filters(mem)
    past = datetime.now(UTC) - timedelta(days=30)
    hits = await mem.search("picnic plans cancelled", k=10, filters={"now": past})
    assert ids["gone"] in {h.id for h in hits}


async def test_bad_filters_are_rejected(mem: BaseMemory) -> None:
    with pytest.raises(ValueError, match="unknown search filter"):
        await mem.search("x", filters={"knd": "episode"})
    with pytest.raises(ValueError, match="min_trust"):
        await mem.search("x", filters={"min_trust": "high"})
    with pytest.raises(ValueError, match="time"):
        await mem.search("x", filters={"since": "last tuesday"})


async def test_bad_writes_are_rejected_and_write_nothing(mem: BaseMemory) -> None:
    with pytest.raises(ValueError, match="trust"):
        await mem.write("x", kind="fact", metadata={"trust": 1.5})
    with pytest.raises(ValueError, match="kind"):
        await mem.write("x", kind="../evil", metadata={})
    with pytest.raises(ValueError, match="date"):
        await mem.write("x", kind="fact", metadata={"created": "yesterday-ish"})
    assert list(mem.group.memory_files()) == []


@pytest.mark.parametrize("bad", ["../escape", "a/../../b", "/abs", "a//b", "a/.", "..", ".",
                                 "", ".hidden", "a\\b",
                                 "x\x00y", "line\nbreak", " padded", "z" * 201])
async def test_path_traversal_and_bad_ids_are_rejected(mem: BaseMemory, bad: str) -> None:
    with pytest.raises(InvalidMemoryId):
        await mem.write("x", kind="fact", metadata={"id": bad})
    with pytest.raises(InvalidMemoryId):
        await mem.read(bad)
    with pytest.raises(InvalidMemoryId):
        await mem.update(bad, "x")
    with pytest.raises(InvalidMemoryId):
        await mem.delete(bad)
    outside = [p for p in mem.group.path.parent.parent.rglob("*") if mem.group.path not in
               [p, *p.parents]]
    assert all(p.is_dir() for p in outside)


async def test_groups_are_isolated(data_dir: Path, backend: str) -> None:
    a = open_memory(data_dir, "telegram:a", backend, **backend_options(backend))
    b = open_memory(data_dir, "telegram:b", backend, **backend_options(backend))
    try:
        mid = await a.write("secret plan of group a", kind="fact", metadata={"id": "same"})
        assert await b.search("secret plan", k=10) == []
        with pytest.raises(MemoryNotFound):
            await b.read(mid)
        await b.write("group b thing", kind="fact", metadata={"id": "same"})
        assert (await a.read("same")).content == "secret plan of group a"
    finally:
        a.close()
        b.close()


async def test_index_is_rebuilt_when_deleted(mem: BaseMemory, data_dir: Path,
                                             backend: str) -> None:
    mid = await mem.write("Melanie paints sunsets at the lake.", kind="episode", metadata={})
    other = await mem.write("Completely unrelated tax paperwork.", kind="episode", metadata={})
    shutil.rmtree(mem.group.index_dir)
    # The open instance notices the missing index ...
    hits = await mem.search("Melanie painting sunset", k=1)
    assert [h.id for h in hits] == [mid]
    # ... and a fresh process-equivalent instance rebuilds too.
    shutil.rmtree(mem.group.index_dir)
    fresh = open_memory(data_dir, GROUP, backend, **backend_options(backend))
    try:
        assert {h.id for h in await fresh.search("lake sunsets paperwork", k=5)} == {mid, other}
        assert (await fresh.read(other)).content == "Completely unrelated tax paperwork."
    finally:
        fresh.close()


async def test_hand_edits_are_seen_by_the_next_search(mem: BaseMemory) -> None:
    mid = await mem.write("The wifi password is on the fridge.", kind="fact", metadata={})
    await mem.search("wifi", k=1)  # index is warm
    path = next(mem.group.memory_files())
    text = path.read_text()
    # In-place edit (no rename), keeping the size the same to defeat a size-only check.
    edited = text.replace("fridge.", "router.")
    assert len(edited) == len(text)
    with open(path, "r+", encoding="utf-8") as fh:
        fh.write(edited)
    hits = await mem.search("router", k=3)
    assert [h.id for h in hits] == [mid]
    assert (await mem.read(mid)).content.endswith("router.")
    stale = await mem.search("fridge", k=3)
    assert all("fridge" not in h.content for h in stale)
    if mem.backend == "file":
        assert stale == []


async def test_hand_made_and_hand_deleted_files(mem: BaseMemory) -> None:
    mid = await mem.write("Frank is allergic to peanuts.", kind="fact", metadata={})
    await mem.search("peanuts", k=1)
    # A file written by hand, without front matter.
    (mem.group.path / "procedures" / "deploy-howto.md").write_text(
        "To deploy, run make release and watch the canary dashboard.\n")
    hits = await mem.search("how do I deploy a release", k=3)
    assert hits and hits[0].id == "deploy-howto"
    assert hits[0].kind == "procedure"
    assert (await mem.read("deploy-howto")).content.startswith("To deploy")
    # A file deleted by hand disappears from search and read.
    next(p for p in mem.group.memory_files() if "peanut" in p.read_text()).unlink()
    assert mid not in {h.id for h in await mem.search("peanuts allergy", k=5)}
    with pytest.raises(MemoryNotFound):
        await mem.read(mid)


async def test_broken_front_matter_still_indexes(mem: BaseMemory) -> None:
    path = mem.group.path / "entities" / "gina.md"
    path.write_text("---\nid: [unclosed\n---\nGina runs the bakery on Elm street.\n")
    hits = await mem.search("bakery Elm street", k=3)
    assert hits and "Gina runs the bakery" in hits[0].content


_WRITER = textwrap.dedent("""
    import asyncio, sys
    from memory_store import open_memory

    async def main(data, backend, tag, n):
        mem = open_memory(data, "test:g1", backend)
        for i in range(n):
            await mem.write(f"writer {tag} note {i} about shared topic", kind="episode",
                            metadata={"id": f"{tag}-{i}", "source": f"proc:{tag}"})
            if i % 5 == 0:
                await mem.search("shared topic", k=3)
        mem.close()

    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
""")


async def test_concurrent_writers_in_two_processes_lose_nothing(mem: BaseMemory,
                                                                data_dir: Path,
                                                                backend: str) -> None:
    n = 25
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(data_dir), backend, tag,
                               str(n)], env=env) for tag in ("a", "b")]
    assert [p.wait(timeout=240) for p in procs] == [0, 0]
    expected = {f"{t}-{i}" for t in ("a", "b") for i in range(n)}
    files = list(mem.group.memory_files())
    assert len(files) == 2 * n
    for mid in expected:
        assert (await mem.read(mid)).source.startswith("proc:")
    hits = await mem.search("writer note shared topic", k=200)
    assert {h.id for h in hits} == expected
    audit = [json.loads(line) for line in AuditLog(mem.group.path).path.read_text().splitlines()]
    assert sorted(e["id"] for e in audit if e["op"] == "write") == sorted(expected)


async def test_reindex_reports_count(mem: BaseMemory) -> None:
    for i in range(3):
        await mem.write(f"item {i}", kind="note", metadata={})
    assert mem.reindex() == 3
    assert len(await mem.search("item", k=10)) == 3


def test_dropped_memories_release_their_watchers(data_dir: Path) -> None:
    """Workers open a Memory per turn; forgetting close() must not exhaust inotify."""
    from memory_store.index import InotifyWatcher

    for _ in range(300):
        m = open_memory(data_dir, GROUP, "file")
        m.search_sync("anything")
        del m
    last = open_memory(data_dir, GROUP, "file")
    try:
        if sys.platform.startswith("linux"):
            assert isinstance(last.catalog._watcher, InotifyWatcher)
    finally:
        last.close()


@pytest.mark.parametrize("watch", ["poll", "auto"])
async def test_hand_edits_are_seen_with_either_watcher(data_dir: Path, watch: str) -> None:
    mem = open_memory(data_dir, GROUP, "file", watch=watch)
    try:
        mid = await mem.write("Lunch is at noon.", kind="fact", metadata={})
        await mem.search("lunch", k=1)
        path = next(mem.group.memory_files())
        path.write_text(path.read_text().replace("noon", "one"))
        assert (await mem.search("lunch", k=1))[0].content == "Lunch is at one."
        (mem.group.path / "notes" / "extra.md").write_text("Dinner is at eight.")
        assert [h.id for h in await mem.search("dinner", k=1)] == ["extra"]
        assert mid in {h.id for h in await mem.search("lunch", k=5)}
    finally:
        mem.close()


async def test_unknown_watch_mode_is_rejected(data_dir: Path) -> None:
    with pytest.raises(ValueError, match="watch mode"):
        open_memory(data_dir, GROUP, "file", watch="sometimes")


async def test_symlinks_in_the_group_are_not_followed(mem: BaseMemory, tmp_path: Path) -> None:
    secret = tmp_path / "outside-secret.md"
    secret.write_text("the launch code is swordfish")
    await mem.write("harmless note about fish", kind="note", metadata={"id": "fish"})
    link = mem.group.path / "notes" / "stolen.md"
    link.symlink_to(secret)
    hits = await mem.search("launch code swordfish", k=10)
    assert all("swordfish" not in h.content for h in hits)
    with pytest.raises(MemoryNotFound):
        await mem.read("stolen")
    # A real file later swapped for a link drops out of the index too.
    target = next(p for p in mem.group.memory_files() if p.name == "fish.md")
    target.unlink()
    target.symlink_to(secret)
    assert all("swordfish" not in h.content for h in await mem.search("swordfish", k=10))
    with pytest.raises(MemoryNotFound):
        await mem.read("fish")
