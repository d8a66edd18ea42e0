"""Email after an ambiguous SMTP failure (issue 30), against the real dovecot and the
test relay (it delivers over LMTP), through the real outbox and Valkey: the relay takes
the mail, then drops the connection before its 250 (and, separately, answers after the
client's read timeout). The bot sent itself an envelope-only copy, so the outbox finds
it and does not send again; the copy never reaches the sink and ends up as the one copy
in Sent, leaving nothing in the INBOX."""

from __future__ import annotations

from email.message import EmailMessage
from email.parser import BytesParser
from email.policy import default as default_policy

import aioimaplib
import pytest
import redis.asyncio as aioredis

from channels.email.compose import reply_message_id
from tests.channels import test_ambiguous_send as ambiguous
from tests.channels.harness_email import (
    BOT,
    TRIGGER_ID,
    EmailHarness,
    append,
    started_channel,
)
from tests.channels.kit import eventually
from tests.channels.test_ambiguous_send import outbox_for
from tests.fakes import dovecot

pytestmark = pytest.mark.skipif(dovecot.should_skip(), reason=dovecot.SKIP_REASON)

# the Valkey and Redis client fixtures of the outbox tests
valkey = ambiguous.valkey
r = ambiguous.r


def reply(h: EmailHarness, reply_id: str) -> dict[str, str]:
    out = h.outbound("Here is the plan.").model_copy(update={"reply_id": reply_id})
    return {"type": "reply", "data": out.model_dump_json()}


async def folder(admin: aioimaplib.IMAP4, name: str) -> list[EmailMessage]:
    response = await admin.select(name)
    assert response.result == "OK", response
    fetched = await admin.fetch("1:*", "(BODY.PEEK[])")
    raws = [bytes(line) for line in fetched.lines if isinstance(line, bytearray)]
    parsed = [BytesParser(policy=default_policy).parsebytes(raw) for raw in raws]
    return [m for m in parsed if isinstance(m, EmailMessage)]


async def filed_once(h: EmailHarness, message_id: str) -> None:
    """The bot's copy is moved to Sent, once, and nothing but the question stays in the
    INBOX; the receiver never passed the copy on as a message."""

    async def moved() -> bool:
        inbox = [str(m["Message-ID"]) for m in await folder(h.admin, "INBOX")]
        sent = [str(m["Message-ID"]) for m in await folder(h.admin, "Sent")]
        return inbox == [f"<{TRIGGER_ID}>"] and sent == [f"<{message_id}>"]

    await eventually(moved)
    assert h.sink.received == []


def submissions(h: EmailHarness) -> list[list[str]]:
    with h.smtp.lock:
        return [rcpts for _, rcpts, _ in h.smtp.received]


async def test_dropped_before_the_250_is_found_and_not_sent_again(r: aioredis.Redis) -> None:
    async with started_channel({"sent_wait": 20.0}, relay=True) as h:
        ob = outbox_for(r, h.channel)
        # queued, the copy lands after the outbox's first retry would (its backoff is at
        # most 0.5 s): the channel has to wait for it
        h.smtp.drop_next(deliver_after=1.5)
        assert await ob.handle(reply(h, "re-1")) is True
        bot = h.channel.settings.address
        [rcpts] = submissions(h)  # sent once
        assert rcpts == ["ada@example.org", "bob@example.com", bot]
        assert ob.stats.ambiguous == 1 and ob.stats.sent == 1
        message_id = reply_message_id("re-1", 0, bot)
        assert await ob.outcomes.outcome("re-1") == {0: ("delivered", message_id)}
        await filed_once(h, message_id)


async def test_answered_after_the_read_timeout_is_found_and_not_sent_again(
    r: aioredis.Redis
) -> None:
    async with started_channel({"timeout": 2.0}, relay=True) as h:
        ob = outbox_for(r, h.channel)
        h.smtp.answer_late(3.0)  # delivered at once, answered after the 2 s timeout
        assert await ob.handle(reply(h, "re-2")) is True
        assert len(submissions(h)) == 1
        assert ob.stats.ambiguous == 1 and ob.stats.sent == 1
        await filed_once(h, reply_message_id("re-2", 0, h.channel.settings.address))


async def test_no_copy_in_time_is_sent_again_and_counted(r: aioredis.Redis) -> None:
    async with started_channel({"sent_wait": 0.5}, relay=True) as h:
        ob = outbox_for(r, h.channel)
        h.smtp.drop_next(deliver_after=60)  # still queued when the wait ends
        assert await ob.handle(reply(h, "re-3")) is True
        assert len(submissions(h)) == 2  # at least once, rather than lost
        assert ob.stats.ambiguous == 1 and ob.stats.sent == 1


async def test_a_normal_send_leaves_one_copy_in_sent_and_none_in_the_inbox() -> None:
    async with started_channel(relay=True) as h:
        out = h.outbound("Here is the plan.")
        message_id = await h.channel.send_chunk(out, h.channel.render(out.text)[0], 0)
        [rcpts] = submissions(h)
        bot = h.channel.settings.address
        assert bot in rcpts  # the envelope names the bot; the headers never do
        [sent] = h.smtp.messages()
        headers = " ".join(str(sent[name] or "") for name in ("To", "Cc", "Bcc"))
        assert bot not in headers and BOT not in headers
        await filed_once(h, message_id)


async def test_without_sent_copies_the_bot_sends_itself_nothing() -> None:
    # append_sent = "never": the server files sent mail (as Gmail does), so its Sent
    # folder is the proof, and no copy of the bot's own is sent
    async with started_channel({"append_sent": "never"}, relay=True) as h:
        out = h.outbound("Here is the plan.")
        await h.channel.send_chunk(out, h.channel.render(out.text)[0], 0)
        assert submissions(h) == [["ada@example.org", "bob@example.com"]]


async def test_a_forged_copy_with_the_predicted_message_id_does_not_silence_the_reply(
) -> None:
    # reply Message-IDs derive from the reply id: a thread member can compute one and
    # mail it to the bot, From the bot, first; only a copy with the chunk's text counts
    async with started_channel(relay=True) as h:
        bot = h.channel.settings.address
        out = h.outbound("Here is the plan.")
        forged = (f"From: {bot}\r\nTo: {bot}\r\nSubject: Re: Plans for the week\r\n"
                  f"Message-ID: <{reply_message_id(out.reply_id, 0, bot)}>\r\n\r\n"
                  "Nothing to see.\r\n").encode()
        await append(h.admin, forged)
        await h.channel.send_chunk(out, h.channel.render(out.text)[0], 0)
        assert len(submissions(h)) == 1
        assert await h.channel.find_sent(out, 0) == reply_message_id(out.reply_id, 0, bot)
