"""A group's skills inside its sandbox, through the real tool host: readable and
runnable at ``/skills/<name>``, never writable (even where the host folder is)."""

from __future__ import annotations

from memory_store.files import global_skills_dir, group_dir
from tests.sandbox.test_toolhost import Host, host  # noqa: F401 (the real tool host)


def test_the_sandbox_runs_a_skills_script_and_cannot_write_into_it(
        host: Host) -> None:  # noqa: F811 (the fixture imported above)
    folder = global_skills_dir(host.data) / "stamp"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: stamp\ndescription: stamps\n---\nRun it.\n")
    (folder / "stamp.sh").write_text("echo stamped-$((6*7))\n")
    # writable on the host for anyone: only the read-only mount keeps the sandbox out
    for path in (folder, *folder.iterdir()):
        path.chmod(0o777)
    host.hold_lock("local:skiller", "tok-sk")
    ran = host.call("local:skiller", "run_command", {"command": "sh /skills/stamp/stamp.sh"},
                    token="tok-sk")
    assert ran.ok and "stamped-42" in ran.output, ran
    for attempt in ("echo x >> /skills/stamp/stamp.sh", "touch /skills/stamp/new",
                    "rm /skills/stamp/SKILL.md", "mkdir /skills/stamp/d",
                    "mkdir /skills/planted"):
        tried = host.call("local:skiller", "run_command", {"command": attempt},
                          token="tok-sk")
        assert not tried.ok, (attempt, tried)
    assert sorted(p.name for p in folder.iterdir()) == ["SKILL.md", "stamp.sh"]
    assert (folder / "stamp.sh").read_text() == "echo stamped-$((6*7))\n"
    # the skills folders themselves are not in view, nor the data dir
    seen = host.call("local:skiller", "run_command", {"command": "ls /skills; ls /"},
                     token="tok-sk")
    assert seen.output.split("--- stdout ---\n")[1].startswith("stamp\n")
    # the group's own skill of that name is the one mounted, dropped in between calls
    own = group_dir(host.data, "local:skiller") / "skills" / "stamp"
    own.mkdir(parents=True)
    (own / "SKILL.md").write_text("---\nname: stamp\ndescription: ours\n---\nOurs.\n")
    (own / "stamp.sh").write_text("echo our-stamp\n")
    ours = host.call("local:skiller", "run_command", {"command": "sh /skills/stamp/stamp.sh"},
                     token="tok-sk")
    assert ours.ok and "our-stamp" in ours.output, ours
