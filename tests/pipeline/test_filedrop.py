"""File triggers (gateway/intake/_filedrop.py): a file dropped into a group's ``inbox/`` gives one
turn; a file still being written is not taken; a restart never takes a file twice."""

from __future__ import annotations

import os
import time
from pathlib import Path

import redis.asyncio as aioredis

from gateway.intake import FILE_DROP_SENDER_NAME, DrainEnqueuer, FileDrop, Inbox, file_message
from gateway.queue import Keys
from memory_store import GroupDirectory
from tests.pipeline.conftest import Stack

GROUP = "local:team"
K = Keys()


class Clock:
    """The scanner's clock, moved by the test: the 2-second rule without sleeping."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _inbox(stack: Stack) -> Path:
    return GroupDirectory(stack.data_dir, GROUP).ensure().path / "inbox"


def _gateway_inbox(stack: Stack, client: aioredis.Redis) -> Inbox:
    return Inbox(stack.config, client, DrainEnqueuer(stack.config, stack.r, K), K)


async def test_a_file_is_taken_only_once_stable_and_never_twice(stack: Stack) -> None:
    client = aioredis.Redis.from_url(stack.valkey.url, decode_responses=True)
    try:
        await _taken_once(stack, _gateway_inbox(stack, client))
    finally:
        await client.aclose()


async def _taken_once(stack: Stack, gw: Inbox) -> None:
    inbox = _inbox(stack)
    clock = Clock()
    drop = FileDrop(stack.data_dir, gw.accept_operator, clock=clock)
    for name in (".hidden.txt", "report.txt.part", "~$memo.docx", "draft.txt~"):
        (inbox / name).write_text("not yet")
    growing = inbox / "notes.txt"
    with growing.open("w") as fh:  # written in place, in two goes
        fh.write("first half; ")
        fh.flush()
        assert await drop.scan_once() == []
        clock.now = 1.9
        assert await drop.scan_once() == []
        fh.write("second half")
        fh.flush()
        clock.now = 2.5  # changed since last seen: the 2 seconds start again
        assert await drop.scan_once() == []
        clock.now = 4.4
        assert await drop.scan_once() == []
    clock.now = 4.6
    [done] = await drop.scan_once()
    assert done == inbox / "done" / "notes.txt" and not growing.exists()
    clock.now = 100.0  # the ignored ones stay where they are, untaken
    assert await drop.scan_once() == []
    assert sorted(os.listdir(inbox)) == sorted(["done", ".hidden.txt", "report.txt.part",
                                                "~$memo.docx", "draft.txt~"])
    [entry] = stack.r.lrange(K.mailbox(GROUP), 0, -1)
    assert b"first half; second half" in entry and FILE_DROP_SENDER_NAME.encode() in entry

    # A file renamed in is complete: taken at once. The gateway dies after pushing it,
    # before moving it: after the restart the push is a duplicate and the file moves.
    staged = stack.tmp / "staged.csv"
    staged.write_text("a,b\n1,2\n")
    os.utime(staged, (1_700_000_000, 1_700_000_000))  # written earlier, then moved
    os.rename(staged, inbox / "table.csv")
    st = os.stat(inbox / "table.csv")
    assert await gw.accept_operator(file_message(GROUP, inbox / "table.csv", st)) == "engage"
    restarted = FileDrop(stack.data_dir, gw.accept_operator, clock=Clock())
    [moved] = await restarted.scan_once()
    assert moved == inbox / "done" / "table.csv"
    assert gw.counts["duplicate"] == 1
    assert stack.r.llen(K.mailbox(GROUP)) == 2
    assert await FileDrop(stack.data_dir, gw.accept_operator, clock=Clock()).scan_once() == []
    # moved back in from done/ on purpose: a new drop (the move sets its change time)
    time.sleep(0.05)  # past the file system's timestamp granularity, so the time moves
    os.rename(moved, inbox / "table.csv")
    [again] = await FileDrop(stack.data_dir, gw.accept_operator, clock=Clock()).scan_once()
    assert again.parent == inbox / "done" and again.name.startswith("table.")
    assert stack.r.llen(K.mailbox(GROUP)) == 3 and gw.counts["duplicate"] == 1


async def test_a_dropped_file_gives_one_turn(stack: Stack) -> None:
    inbox = _inbox(stack)
    stack.start_workers(1)
    await stack.start_gateway()
    (stack.tmp / "todo.md").write_text("buy MARK-oat milk\n")
    os.rename(stack.tmp / "todo.md", inbox / "todo.md")  # renamed in: no 2 s wait
    await stack.wait_for(lambda: len(stack.turns()) == 1, what="the file's turn")
    await stack.settled(GROUP)
    [turn] = stack.turns()
    assert "buy MARK-oat milk" in turn["prompt"] and FILE_DROP_SENDER_NAME in turn["prompt"]
    assert (inbox / "done" / "todo.md").exists() and not (inbox / "todo.md").exists()
    [chunk] = [e for e in stack.chat_events("team") if e.get("type") == "chunk"]
    assert chunk["text"].startswith("ack file-")
    # a gateway restarted over the same data takes nothing again
    await stack.stop_gateway()
    await stack.start_gateway()
    gw = stack.gateway
    assert gw is not None and gw.inbox is not None
    assert await FileDrop(stack.data_dir, gw.inbox.accept_operator).scan_once() == []
    assert len(stack.turns()) == 1


def test_the_message_gives_the_size_with_its_fraction(tmp_path: Path) -> None:
    sizes = {"small.bin": (100, "100 bytes"), "half.bin": (1536, "1.5 KB"),
             "big.bin": (5 * 1024 * 1024 + 300 * 1024, "5.3 MB")}
    for name, (size, shown) in sizes.items():
        path = tmp_path / name
        path.write_bytes(b"\0" * size)
        text = file_message(GROUP, path, path.stat()).text
        assert f"dropped into the inbox: {shown}, " in text, text
