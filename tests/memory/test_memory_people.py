"""Names of a group's people: learned from metadata, kept out of both queries, and a
prior for the records of the person a question names."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from memory_store import MemoryRecord, open_memory
from memory_store.backends.hybrid import HybridMemory
from memory_store.index import Vectors, default_embedder
from memory_store.ranking import name_words, named_in, without_names

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


class RecordingEmbedder:
    """The real model, remembering every text it was asked to embed."""

    def __init__(self) -> None:
        self.inner = default_embedder()
        self.dim = self.inner.dim
        self.model_id = self.inner.model_id
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.texts.extend(texts)
        return self.inner.embed(texts)


def _record(**metadata: object) -> MemoryRecord:
    return MemoryRecord(id="x", kind="episode", content="hi", source="s", created=T0,
                        updated=T0, trust=0.5, metadata=dict(metadata))


def test_name_words_from_speaker_and_participants() -> None:
    rec = _record(speaker="Ann", participants=["Bo Lee (telegram:42)", "Will (matrix:@w)"])
    # "will" is a stopword: a name that is also a common word is never stripped.
    assert name_words(rec) == {"ann", "bo", "lee"}
    assert name_words(_record()) == set()
    assert name_words(_record(speaker=7, participants="Ann")) == set()
    # An address alone (the workers' fact attribution) is nobody's name.
    assert name_words(_record(participants=["telegram:42", "slack:T1/U2"])) == set()


def test_without_names_strips_standalone_names_only() -> None:
    names = frozenset({"ann", "bo"})
    assert without_names("What does Ann do to relax?", names) == "What does do to relax?"
    assert without_names("Did ann, or Bo? go", names) == "Did or go"
    # A possessive says whose thing is asked about: it stays.
    assert without_names("What do Ann's kids like?", names) == "What do Ann's kids like?"
    assert without_names("Annie went home", names) == "Annie went home"
    # Nothing but names: the query is kept as it is.
    assert without_names("Ann?", names) == "Ann?"
    assert without_names("What does Ann like?", frozenset()) == "What does Ann like?"


def test_hybrid_learns_names_and_embeds_the_query_without_them(tmp_path: Path) -> None:
    emb = RecordingEmbedder()
    mem = open_memory(tmp_path, "t:people", "hybrid", embedder=emb, background=False)
    assert isinstance(mem, HybridMemory)
    mem.write_sync("Ann: I just signed up for a pottery class.", kind="episode",
                   metadata={"id": "t1", "speaker": "Ann", "created": T0.isoformat()})
    mem.write_sync("Bo: Nice! Have fun.", kind="episode",
                   metadata={"id": "t2", "participants": ["Bo Lee (telegram:42)"],
                             "created": T0.isoformat()})
    mem.flush()
    assert mem.people.names == {"ann", "bo", "lee"}
    emb.texts.clear()
    hits = mem.search_sync("What class did Ann sign up for?", k=2)
    assert emb.texts == ["What class did sign up for?"]
    # Ann's own turn comes first: the question names her.
    assert hits[0].id == "t1"
    mem.close()

    # Reopened: the names come from the catalog's table, not from the records.
    mem = open_memory(tmp_path, "t:people", "hybrid", embedder=emb, background=False)
    assert isinstance(mem, HybridMemory)
    assert mem.people.names == {"ann", "bo", "lee"}
    # An index from before the table learns the names of what it holds, once.
    mem.catalog.conn.execute("DROP TABLE people")
    mem.people.attach(mem.catalog.conn)
    assert mem.people.names == {"ann", "bo", "lee"}
    mem.close()


def test_named_in_finds_names_possessives_included() -> None:
    names = frozenset({"ann", "bo"})
    assert named_in("What do Ann's kids like?", names) == {"ann"}
    assert named_in("Did ann, or \u201cBo\u201d? go", names) == {"ann", "bo"}
    assert named_in("Annie went home", names) == set()


def _turn(mem: HybridMemory, tid: str, who: str, text: str, minute: int) -> None:
    mem.write_sync(f"{who}: {text}", kind="episode", metadata={
        "id": tid, "speaker": who, "created": T0.replace(minute=minute).isoformat()})


def test_the_named_persons_own_turn_outranks_a_turn_about_them(tmp_path: Path) -> None:
    mem = open_memory(tmp_path, "t:spoke", "hybrid", embedder=default_embedder(),
                      background=False)
    assert isinstance(mem, HybridMemory)
    # Hours apart: separate sessions, so no score passes between them.
    _turn(mem, "t1", "Bo", "Ann, I heard you love hiking in the hills with your dog!", 0)
    mem.write_sync("Ann: I love baking bread on Sundays.", kind="episode", metadata={
        "id": "t2", "speaker": "Ann", "created": T0.replace(hour=18).isoformat()})
    mem.flush()
    query = "What does Ann love?"
    assert [h.id for h in mem.search_sync(query, k=2)] == ["t2", "t1"]
    mem.speaker_weight = 0.0
    assert mem.search_sync(query, k=2)[0].id == "t1"  # the prior is what decides
    mem.close()


def test_whose_records_follow_edits_deletes_reopens_and_older_indexes(tmp_path: Path) -> None:
    emb = default_embedder()
    mem = open_memory(tmp_path, "t:spoke", "hybrid", embedder=emb, background=False)
    assert isinstance(mem, HybridMemory)
    for i, who in enumerate(["Ann", "Bo", "Ann"]):
        _turn(mem, f"t{i}", who, "hello", i)
    # A fact about Ann is hers too; its attribution's addresses name nobody.
    mem.write_sync("Ann moved to Porto.", kind="entity", metadata={
        "id": "f1", "entity": "Ann", "participants": ["telegram:42"]})

    def whose(m: HybridMemory, *names: str) -> list[str]:
        rows = m.people.records_of(names).tolist()
        return sorted(m.catalog.records(rows)[r].id for r in rows)

    assert whose(mem, "ann") == ["f1", "t0", "t2"]
    assert whose(mem, "ann", "bo") == [] and whose(mem, "telegram") == []
    assert mem.people.names == {"ann", "bo"}
    mem.update_sync("t1", "Ann: hello", changes={"speaker": "Ann"})
    assert whose(mem, "ann") == ["f1", "t0", "t1", "t2"] and whose(mem, "bo") == []
    mem.delete_sync("t0")
    assert whose(mem, "ann") == ["f1", "t1", "t2"]
    mem.close()
    mem = open_memory(tmp_path, "t:spoke", "hybrid", embedder=emb, background=False)
    assert isinstance(mem, HybridMemory)
    assert whose(mem, "ann") == ["f1", "t1", "t2"]
    mem.catalog.conn.execute("DROP TABLE person_records")
    mem.people.attach(mem.catalog.conn)
    assert whose(mem, "ann") == ["f1", "t1", "t2"]
    mem.close()


def test_a_file_moved_to_a_folder_scanned_first_leaves_no_stale_row(tmp_path: Path) -> None:
    # notes/ is scanned after entities/: the move's new path is indexed first and takes
    # the id from the vanished path's row; the indexes beside the catalog must hear it.
    mem = open_memory(tmp_path, "t:spoke", "hybrid", embedder=default_embedder(),
                      background=False)
    assert isinstance(mem, HybridMemory)
    mem.write_sync("Ann likes tea.", kind="note", metadata={"id": "n1", "speaker": "Ann"})
    mem.write_sync("Bo likes coffee.", kind="note", metadata={"id": "n2", "speaker": "Bo"})
    old = mem.group.path / "notes" / "n1.md"
    (mem.group.path / "entities").mkdir(exist_ok=True)
    old.rename(mem.group.path / "entities" / old.name)
    mem.catalog.refresh(full=True)
    rows = mem.people.records_of(("ann",)).tolist()
    assert [r.id for r in mem.catalog.records(rows).values()] == ["n1"]
    assert len(rows) == 1
    mem.close()
