"""End to end: the model's ``send_file`` sends a workspace file to the chat once, through
a real worker, tool host, sandbox and outbox, to the local channel; a redelivered file
event does not send it twice; a path outside the workspace and a too-big file are
refused with a clear message."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from channels.models import Outbound
from gateway.queue import events
from memory_store.files import outboxfiles
from tests.pipeline.conftest import Stack, Valkey
from tests.sandbox.hoststack import tools_stack
from tests.sandbox.sendfile_model import REPORT

CONFIG = """
[tools]
sandbox = true
[tools.limits]
send_file_mb = 1
"""


@pytest.fixture
async def stack(tmp_path: Path, valkey: Valkey) -> AsyncIterator[Stack]:
    async with tools_stack(tmp_path, valkey, "tests.sandbox.sendfile_model:model", CONFIG) as s:
        yield s


def files_in(stack: Stack, chat: str) -> list[dict[str, str]]:
    return [e for e in stack.chat_events(chat) if e.get("type") == "file"]


@pytest.mark.asyncio
async def test_send_file_arrives_once_and_bad_paths_are_refused(stack: Stack) -> None:
    ex = await stack.ask("ada", "ada", "please send report", timeout=90)
    assert ex.reply is not None and "sent report.txt (22 bytes) to the chat" in ex.reply
    await stack.wait_for(lambda: files_in(stack, "ada"), 30, "the file")
    (sent,) = files_in(stack, "ada")
    assert base64.b64decode(sent["data"]).decode() == REPORT
    assert (sent["name"], sent["caption"], sent["size"]) == ("report.txt", "the report", "22")
    # the outbox gets the same event again (a redelivery): the file is not sent twice
    sha = hashlib.sha256(REPORT.encode()).hexdigest()
    again = events.file(Outbound(channel="local", chat_id="ada", text="the report",
                                 reply_id=sent["reply_id"]), sha, "report.txt", 22)
    stack.r.xadd("pnc:outbox", again.fields())  # type: ignore[arg-type]
    # and a second stored copy read from the group dir proves the path the outbox takes
    assert (stack.data_dir / "groups/local/ada/outbox_files" / sha).read_bytes() == \
        REPORT.encode()
    # kept with the send naming it, for the gateway's sweep (gateway.outgoing.prune_sent_files)
    [waiting] = outboxfiles.listing(stack.data_dir / "groups/local/ada/outbox_files")
    assert (waiting.sha256, waiting.refs) == (sha, (sent["reply_id"],))
    outside = await stack.ask("ada", "ada", "please send outside", timeout=90)
    assert outside.reply is not None and "is outside the workspace" in outside.reply
    big = await stack.ask("ada", "ada", "please send big", timeout=90)
    assert big.reply is not None
    assert "big.bin is 2097152 bytes; send_file sends at most 1 MiB" in big.reply
    await stack.settled("local:ada")
    assert len(files_in(stack, "ada")) == 1
