"""``Channel.send_file`` against every platform's fake: the file arrives whole, with its
name, caption and thread, on the platforms that send files; the others refuse it with a
``PermanentError`` the outbox turns into a text note (gateway/outgoing/_filesend.py)."""

from __future__ import annotations

import pytest

from channels.errors import PermanentError
from tests.channels.kit import AdapterHarness, HarnessSpec

DATA = bytes(range(256)) * 40  # binary, 10 KiB: no text encoding survives by chance
#: platforms whose adapters send files (the rest refuse)
SENDS_FILES = ("telegram", "slack", "discord", "matrix")


@pytest.mark.asyncio
async def test_send_file_reaches_the_fake_or_is_refused(contract_spec: HarnessSpec) -> None:
    async with contract_spec.factory() as harness:
        h: AdapterHarness = harness
        msg = h.outbound("unused").model_copy(update={"reply_id": "turn-1.file.ab"})
        if contract_spec.platform not in SENDS_FILES:
            with pytest.raises(PermanentError, match="cannot send files"):
                await h.channel.send_file(msg, DATA, "report.bin", "the report")
            return
        platform_id = await h.channel.send_file(msg, DATA, "report.bin", "the report")
        assert platform_id
        (sent,) = h.sent_files()  # type: ignore[attr-defined]
        assert (sent.chat_id, sent.name, sent.data, sent.caption) == \
            (msg.chat_id, "report.bin", DATA, "the report")
        assert sent.thread_id == msg.thread_id
