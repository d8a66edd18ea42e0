"""Schema-versioned group directories (memory_store/files/_schema.py): a version-1 group is
migrated on first open, with a backup, crash-safely; a newer one is refused; redaction
scrubs the backups too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memory_store import GroupDirectory, open_memory
from memory_store.files import (
    BACKUP_MANIFEST,
    SCHEMA_BACKUP_DIR,
    SCHEMA_VERSION,
    AuditLog,
    SchemaTooNew,
    read_schema_version,
    schema_path,
)
from memory_store.maintenance import redact_phrase

GROUP = "test:g1"
SECRET = "passport K7731 Quokka"


def _make_v1(data_dir: Path) -> tuple[Path, bytes]:
    """A group as version 1 left it: real memory files and core files, and its audit log
    (a write, a redaction trail) at the root, with no schema stamp. Returns the group's
    path and the audit log's bytes."""
    mem = open_memory(data_dir, GROUP, "file", watch="poll")
    mem.write_sync(f"Ann said: my {SECRET}", kind="episode",
                   metadata={"id": "turn-1", "trust": 0.8})
    mem.write_sync("Ann likes tea", kind="fact", metadata={"id": "fact-1", "trust": 0.6})
    mem.write_sync("forget me: Wombat", kind="note", metadata={"id": "note-1"})
    redact_phrase(mem, "Wombat", request="forget-1")
    root = mem.group.path
    mem.close()
    meta = root / ".meta"
    os.rename(meta / "audit.jsonl", root / "audit.jsonl")  # version 1's place
    (meta / "schema.json").unlink()
    meta.rmdir()
    return root, (root / "audit.jsonl").read_bytes()


def _ops(root: Path) -> list[tuple[str, str]]:
    return [(e["op"], e["id"]) for e in AuditLog(root).entries()]


def test_a_version_1_group_is_migrated_on_first_open_with_a_backup(tmp_path: Path) -> None:
    root, audit = _make_v1(tmp_path)
    v1_ops = [(e["op"], e["id"]) for e in map(json.loads, audit.decode().splitlines())]
    assert ("redact", "forget-1") in v1_ops and ("write", "turn-1") in v1_ops
    assert read_schema_version(root) == 1

    mem = open_memory(tmp_path, GROUP, "file", watch="poll")
    try:
        # the history (the writes, the redaction trail) is where version 2 reads it
        assert _ops(root) == v1_ops
        assert json.loads(schema_path(root).read_text()) == {"version": SCHEMA_VERSION}
        assert not (root / "audit.jsonl").exists()
        backup = root / SCHEMA_BACKUP_DIR / "v1"
        assert (backup / "audit.jsonl").read_bytes() == audit
        assert (backup / "CLAUDE.md").read_bytes() == (root / "CLAUDE.md").read_bytes()
        assert sorted(p.name for p in (backup / "entities").iterdir()) == ["fact-1.md"]
        manifest = json.loads((backup / BACKUP_MANIFEST).read_text())
        assert "index" not in " ".join(manifest["entries"])
        mem.write_sync("Ann likes green tea", kind="fact", metadata={"id": "fact-2"})
        assert _ops(root)[-1] == ("write", "fact-2")
        assert (backup / "audit.jsonl").read_bytes() == audit  # a copy, not a link
    finally:
        mem.close()
    # opened again: nothing to do, the backup untouched
    GroupDirectory(tmp_path, GROUP).ensure()
    assert sorted(p.name for p in (root / SCHEMA_BACKUP_DIR).iterdir()) == ["v1"]


def test_a_newer_version_is_refused_and_left_alone(tmp_path: Path) -> None:
    gd = GroupDirectory(tmp_path, GROUP).ensure()
    schema_path(gd.path).write_text(json.dumps({"version": SCHEMA_VERSION + 1}))
    before = sorted(p.relative_to(gd.path).as_posix() for p in gd.path.rglob("*"))
    with pytest.raises(SchemaTooNew) as err:
        open_memory(tmp_path, GROUP, "file", watch="poll")
    assert f"schema version {SCHEMA_VERSION + 1}" in str(err.value)
    assert f"up to version {SCHEMA_VERSION}" in str(err.value)
    assert sorted(p.relative_to(gd.path).as_posix() for p in gd.path.rglob("*")) == before


_CHILD = """
import os, sys
from memory_store.files._group import GroupDirectory
from memory_store.files._schema import ensure_current
data_dir, group, stage = sys.argv[1:4]
def crash(name):
    if name == stage:
        os._exit(9)  # a kill: no cleanup, no finally
ensure_current(GroupDirectory(data_dir, group), on_stage=crash)
sys.exit(3)  # the stage was never reached
"""


@pytest.mark.parametrize("stage", ["v1:copied", "v1:backed-up", "v1:applied"])
def test_a_crash_mid_migration_leaves_the_group_untouched_or_migrated(
        tmp_path: Path, stage: str) -> None:
    root, audit = _make_v1(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path), GROUP, stage],
                          env=env, timeout=60, check=False)
    assert done.returncode == 9
    old, new = root / "audit.jsonl", root / ".meta" / "audit.jsonl"
    untouched = old.exists() and old.read_bytes() == audit and not new.exists()
    migrated = new.exists() and new.read_bytes() == audit and not old.exists()
    assert untouched != migrated  # exactly one of the two, never a mix
    assert read_schema_version(root) == 1  # the stamp is written last
    backup = root / SCHEMA_BACKUP_DIR / "v1"
    if stage == "v1:copied":  # before the backup counts: the original is in place
        assert untouched and not backup.exists()
    else:
        assert (backup / "audit.jsonl").read_bytes() == audit

    mem = open_memory(tmp_path, GROUP, "file", watch="poll")  # the next open finishes it
    try:
        assert read_schema_version(root) == SCHEMA_VERSION
        assert new.read_bytes() == audit and not old.exists()
        assert (backup / "audit.jsonl").read_bytes() == audit
        assert sorted(p.name for p in (root / SCHEMA_BACKUP_DIR).iterdir()) == ["v1"]
        assert mem.read_sync("turn-1").content.endswith(SECRET)
    finally:
        mem.close()


def test_redaction_scrubs_the_backups(tmp_path: Path) -> None:
    root, _ = _make_v1(tmp_path)
    mem = open_memory(tmp_path, GROUP, "file", watch="poll")
    try:
        backup = root / SCHEMA_BACKUP_DIR / "v1"
        assert any(b"K7731" in p.read_bytes() for p in backup.rglob("*.md"))
        out = redact_phrase(mem, "K7731", request="forget-2")
        assert any(p.startswith(f"{SCHEMA_BACKUP_DIR}/v1/episodes/") for p in out.paths)
        holding = [p for p in root.rglob("*") if p.is_file() and b"k7731" in
                   p.read_bytes().lower()]
        assert holding == []
        assert any(b"Quokka" in p.read_bytes() for p in backup.rglob("*.md"))  # kept
        [entry] = [e for e in AuditLog(root).entries() if e["id"] == "forget-2"]
        assert "K7731" not in json.dumps(entry)
        assert redact_phrase(mem, "K7731", request="forget-2").paths == []  # idempotent
    finally:
        mem.close()


def test_memory_files_carry_the_schema_version(tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    mem = open_memory(tmp_path, GROUP, "file", watch="poll")
    try:
        mem.write_sync("Ann likes tea", kind="fact", metadata={"id": "fact-1"})
        path, rec = mem._load("fact-1")
        assert f"\nschema: {SCHEMA_VERSION}\n" in path.read_text()
        assert "schema" not in rec.metadata
        # a file a newer version wrote is still read, and the log says so
        path.write_text(path.read_text().replace(f"schema: {SCHEMA_VERSION}",
                                                 f"schema: {SCHEMA_VERSION + 1}"))
        assert mem.read_sync("fact-1").content == "Ann likes tea"
        assert f"schema version {SCHEMA_VERSION + 1}" in caplog.text
    finally:
        mem.close()
