"""Filesystem escapes from a group's sandbox, each tried for real and refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.toolhost.workspace import MountRefused, resolve_mounts
from tests.sandbox.conftest import OTHER_SECRET, Box


def test_the_workspace_is_writable_and_the_command_is_not_root(box: Box) -> None:
    r = box.run("id -u; echo hello > note.txt; cat note.txt")
    assert r.ok, r
    assert r.stdout.decode().split() == ["1000", "hello"]
    assert (box.workspace / "note.txt").read_text() == "hello\n"


def test_writing_outside_the_workspace_is_refused(box: Box) -> None:
    claude = box.other / "CLAUDE.md"
    targets = [str(claude), str(box.data / "planted"), "/usr/planted", "/etc/passwd",
               "/planted", "../planted", "/proc/1/environ"]
    script = "; ".join(f"(echo owned > {t}) 2>/dev/null && echo WROTE {t}" for t in targets)
    r = box.run(script + "; true")
    assert r.ok, r
    assert b"WROTE" not in r.stdout
    assert claude.read_text() == OTHER_SECRET + "\n"
    assert not (box.data / "planted").exists()
    assert not Path("/usr/planted").exists()
    assert not (box.workspace.parent / "planted").exists()


def test_another_groups_directory_is_not_visible(box: Box) -> None:
    other = box.other
    r = box.run(f"cat {other}/CLAUDE.md; ls {other}; ls {box.data}; ls /; "
                "grep -rs bob-core-memory / --exclude-dir=proc --exclude-dir=sys "
                "--exclude-dir=usr; true")
    assert OTHER_SECRET.encode() not in r.stdout + r.stderr
    # nothing of the data dir exists inside: only the system, the workspace and /tmp
    listing = r.stdout.decode().split()
    assert "workspace" in listing and "data" not in listing


def test_a_symlink_in_the_workspace_does_not_lead_outside(box: Box) -> None:
    claude = box.other / "CLAUDE.md"
    (box.workspace / "to_file").symlink_to(claude)
    (box.workspace / "to_dir").symlink_to(box.other)
    (box.workspace / "to_root").symlink_to("/")
    r = box.run("cat to_file; cat to_dir/CLAUDE.md; cat to_root/" + str(claude) + "; "
                "(echo owned > to_file) 2>/dev/null && echo WROTE1; "
                "(echo owned > to_dir/CLAUDE.md) 2>/dev/null && echo WROTE2; "
                "(echo owned > to_dir/new) 2>/dev/null && echo WROTE3; true")
    assert OTHER_SECRET.encode() not in r.stdout + r.stderr
    assert b"WROTE" not in r.stdout
    assert claude.read_text() == OTHER_SECRET + "\n"
    assert sorted(p.name for p in box.other.iterdir()) == ["CLAUDE.md"]


def test_an_allowlisted_mount_is_read_only(box: Box, tmp_path: Path) -> None:
    root = tmp_path / "shared"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "guide.txt").write_text("the guide\n")
    mounts = tuple(resolve_mounts([str(root / "docs")], [str(root)]))
    r = box.run("cat /mnt/docs/guide.txt; (echo x > /mnt/docs/new) 2>/dev/null && echo WROTE;"
                " true", mounts=mounts)
    assert r.stdout.decode() == "the guide\n"
    assert not (root / "docs" / "new").exists()


def test_an_allowlist_entry_resolving_outside_its_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    root.mkdir()
    secret = tmp_path / "secret"
    secret.mkdir()
    (root / "sneaky").symlink_to(secret)
    for entry in (str(root / "sneaky"), str(root / ".." / "secret"), "/etc"):
        with pytest.raises(MountRefused, match="outside every"):
            resolve_mounts([entry], [str(root)])
    # a root that is itself a link is resolved too: what it points to is the root
    (tmp_path / "root_link").symlink_to(root)
    (root / "ok").mkdir()
    assert resolve_mounts([str(root / "ok")], [str(tmp_path / "root_link")])[0].source == \
        (root / "ok").resolve()


def test_filling_the_workspace_past_its_quota(box: Box) -> None:
    # quota 1 MiB, files up to 1 MiB: a command can overshoot by what it writes itself
    limits = {"workspace_mb": 1, "file_mb": 1}
    first = box.run("head -c 700000 /dev/zero > a; head -c 700000 /dev/zero > b; echo done",
                    **limits)
    assert first.ok and first.stdout == b"done\n"
    assert first.workspace_bytes > 1024 * 1024
    assert any("over its quota" in n for n in first.notes)
    # over the quota: nothing can be written, removing works
    blocked = box.run("(head -c 1000 /dev/zero > c) 2>/dev/null || echo REFUSED; rm b; ls",
                      **limits)
    assert blocked.read_only
    assert b"REFUSED" in blocked.stdout
    assert not (box.workspace / "c").exists() or (box.workspace / "c").stat().st_size == 0
    assert not (box.workspace / "b").exists()
    # back under it: writes work again
    again = box.run("echo fine > d && cat d", **limits)
    assert again.ok and again.stdout == b"fine\n" and not again.read_only


def test_one_file_cannot_pass_the_file_size_limit(box: Box) -> None:
    r = box.run("head -c 3000000 /dev/zero > big; echo $?", file_mb=1)
    assert (box.workspace / "big").stat().st_size == 1024 * 1024
    assert r.stdout.strip() != b"0"
