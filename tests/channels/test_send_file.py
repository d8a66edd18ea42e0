"""``Channel.send_file`` against every platform's fake: the file arrives whole, with its
name, type, caption and thread, on the platforms that send files; the others refuse it
with a ``PermanentError`` the outbox turns into a text note (gateway/outgoing/_filesend.py). A
send whose answer was lost is not doubled by the retry where the platform lets the
adapter dedupe it."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from channels.errors import MaybeSent, PermanentError
from channels.models import group_key
from gateway.intake import GroupFiles
from gateway.outgoing import Outbox
from gateway.queue import Keys, events
from tests.channels import test_ambiguous_send as ambiguous
from tests.channels.harness_email import TRIGGER_ID, started_channel
from tests.channels.kit import AdapterHarness, HarnessSpec
from tests.fakes import dovecot

# the Valkey and Redis client fixtures of the outbox tests
valkey = ambiguous.valkey
r = ambiguous.r

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
    "slack": "files_upload_v2 takes no idempotency key",
    "email": "tested with the relay that delivers the bot's own copy (below)",
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


@pytest.mark.skipif(dovecot.should_skip(), reason=dovecot.SKIP_REASON)
@pytest.mark.asyncio
async def test_an_email_file_keeps_the_thread_and_a_lost_answer_finds_its_copy(
        tmp_path: Path, r: aioredis.Redis) -> None:
    """Through the real outbox: the relay takes the mail with the file and drops the
    connection before its 250; the bot's own copy reaches dovecot and the outbox finds
    it (``find_sent``) instead of sending again. One mail, a reply in the thread."""
    async with started_channel(relay=True) as h:
        msg = h.outbound("the report").model_copy(update={"reply_id": "turn-1.file.ef"})
        files = GroupFiles(tmp_path)
        stored = files.outbox_file(group_key("email", msg.chat_id),
                                   hashlib.sha256(DATA).hexdigest())
        stored.parent.mkdir(parents=True)
        stored.write_bytes(DATA)
        outbox = Outbox(r, {("email", "default"): h.channel}, Keys(), files=files)
        h.smtp.drop_next(deliver_after=0.5)
        event = events.file(msg, hashlib.sha256(DATA).hexdigest(), NAME, len(DATA))
        assert await outbox.handle(event) is True
        [mail] = h.smtp.messages()
        assert (mail["In-Reply-To"], mail["Subject"]) == \
            (f"<{TRIGGER_ID}>", "Re: Plans for the week")
        assert f"<{TRIGGER_ID}>" in str(mail["References"])
        [sent] = h.sent_files()
        assert (sent.chat_id, sent.name, sent.mime, sent.data, sent.caption) == \
            (msg.chat_id, NAME, MIME, DATA, "the report")
        assert await r.exists(Keys().sent(msg.reply_id, 0))
