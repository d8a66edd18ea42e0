"""``Channel.send_file`` against every platform's fake: the file arrives whole, with its
name, type, caption and thread, on the platforms that send files; the others refuse it
with a ``PermanentError`` the outbox turns into a text note (gateway/filesend.py). A
send whose answer was lost is not doubled by the retry where the platform lets the
adapter dedupe it."""

from __future__ import annotations

import pytest

from channels.errors import MaybeSent, PermanentError
from tests.channels.kit import AdapterHarness, HarnessSpec

DATA = bytes(range(256)) * 40  # binary, 10 KiB: no text encoding survives by chance
NAME, MIME = "report.pdf", "application/pdf"  # a type every platform takes as a file
#: platforms whose adapters send files (the rest refuse)
SENDS_FILES = ("telegram", "slack", "discord", "matrix", "whatsapp", "signal", "email")
#: why a retried file send after a lost answer may go twice, per platform without a way
#: to dedupe it (the outbox counts it as ambiguous and sends again: at least once)
NO_DEDUPE = {
    "signal": "signal-cli's send takes no idempotency key, and sent messages cannot be "
              "looked up",
    "telegram": "the Bot API has no idempotency key",
}


@pytest.mark.asyncio
async def test_send_file_reaches_the_fake_or_is_refused(contract_spec: HarnessSpec) -> None:
    async with contract_spec.factory() as harness:
        h: AdapterHarness = harness
        msg = h.outbound("unused").model_copy(update={"reply_id": "turn-1.file.ab"})
        if contract_spec.platform not in SENDS_FILES:
            with pytest.raises(PermanentError, match="cannot send files"):
                await h.channel.send_file(msg, DATA, NAME, "the report")
            return
        platform_id = await h.channel.send_file(msg, DATA, NAME, "the report")
        assert platform_id
        (sent,) = h.sent_files()  # type: ignore[attr-defined]
        assert (sent.chat_id, sent.name, sent.data, sent.caption) == \
            (msg.chat_id, NAME, DATA, "the report")
        assert sent.thread_id == msg.thread_id
        assert sent.mime in (None, MIME)  # None: this fake does not record the type
        if contract_spec.platform in ("whatsapp", "signal", "email"):
            assert sent.mime == MIME


@pytest.mark.asyncio
async def test_a_lost_answer_does_not_double_the_file(contract_spec: HarnessSpec) -> None:
    if contract_spec.platform in NO_DEDUPE:
        pytest.skip(f"{contract_spec.platform}: {NO_DEDUPE[contract_spec.platform]}")
    async with contract_spec.factory() as harness:
        h: AdapterHarness = harness
        if not hasattr(h, "lose_next_answer"):
            pytest.skip(f"{contract_spec.platform}: the fake cannot lose an answer")
        msg = h.outbound("unused").model_copy(update={"reply_id": "turn-1.file.cd"})
        await h.lose_next_answer()  # type: ignore[attr-defined]
        with pytest.raises(MaybeSent):
            await h.channel.send_file(msg, DATA, NAME, "the report")
        await h.answer_lost()  # type: ignore[attr-defined]
        platform_id = await h.channel.send_file(msg, DATA, NAME, "the report")
        assert platform_id
        (sent,) = h.sent_files()  # type: ignore[attr-defined]
        assert (sent.name, sent.data) == (NAME, DATA)
