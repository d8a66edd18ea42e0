"""Outbound: render/send_chunk/typing through the real discord.py REST client to the fake."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from channels.base import Chunk
from channels.discord import DiscordChannel
from channels.discord.render import render
from channels.errors import NetworkError, PermanentError, RateLimited, TransientError
from channels.models import Outbound
from tests.channels.harness_discord import DiscordRig


@pytest.fixture
async def rig() -> AsyncIterator[DiscordRig]:
    async with DiscordRig() as r:
        yield r


def ch(rig: DiscordRig) -> DiscordChannel:
    assert rig.channel is not None
    return rig.channel


def outbound(rig: DiscordRig, text: str, **kw: object) -> Outbound:
    base: dict[str, object] = {
        "channel": "discord", "chat_id": rig.general["id"], "text": text, "reply_id": "r1",
    }
    return Outbound.model_validate({**base, **kw})


LONG = "\n\n".join(
    f"Paragraph {i}: " + " ".join(f"word{j}" for j in range(60)) for i in range(12)
) + "\n\n```python\n" + "\n".join(f"print({i})" for i in range(300)) + "\n```\n"


def test_render_splits_at_2000_and_keeps_markdown() -> None:
    chunks = render(LONG)
    assert len(chunks) > 2
    assert all(len(c.text) <= 2000 for c in chunks)
    # markdown is Discord's native format: nothing is escaped or rewritten
    assert "```python" in chunks[-2].text or "```python" in chunks[-1].text
    for c in chunks:
        assert c.text.count("```") % 2 == 0  # every chunk's fences are balanced
    # the cut code block was closed and reopened with its language for display ...
    assert chunks[-1].text.startswith("```python\n")
    # ... while the plain slices are exactly the model's text
    assert "".join(c.plain for c in chunks) == LONG


def test_render_short_and_blank() -> None:
    assert [c.text for c in render("**hi** @everyone")] == ["**hi** @everyone"]
    assert render("   \n") == []


async def test_reply_lands_with_message_reference_and_no_mass_pings(rig: DiscordRig) -> None:
    trigger = await rig.say(rig.general, "hey bot", mentions=[rig.mention()])
    await rig.next_inbound()
    msg = outbound(rig, "hello @everyone", reply_to_id=trigger["id"])
    [chunk] = ch(rig).render(msg.text)
    sent_id = await ch(rig).send_chunk(msg, chunk, 0)
    [sent] = rig.fake.sent
    assert sent_id == sent["id"]
    assert sent["channel_id"] == rig.general["id"]
    assert sent["content"] == "hello @everyone"
    assert sent["message_reference"] == {
        "type": 0, "message_id": trigger["id"], "channel_id": rig.general["id"],
        "guild_id": rig.guild["id"],
    }
    assert sent["request"]["message_reference"]["fail_if_not_exists"] is False
    assert sent["request"]["allowed_mentions"] == {"parse": [], "replied_user": True}


async def test_long_reply_is_chunked_and_only_the_first_chunk_replies(rig: DiscordRig) -> None:
    trigger = await rig.say(rig.general, "tell me everything")
    msg = outbound(rig, LONG, reply_to_id=trigger["id"])
    chunks = ch(rig).render(msg.text)
    ids = [await ch(rig).send_chunk(msg, c, i) for i, c in enumerate(chunks)]
    assert len(set(ids)) == len(chunks) == len(rig.fake.sent)
    assert all(len(s["content"]) <= 2000 for s in rig.fake.sent)
    refs = [s.get("message_reference") for s in rig.fake.sent]
    assert refs[0] is not None and refs[0]["message_id"] == trigger["id"]
    assert all(r is None for r in refs[1:])
    assert [s["content"] for s in rig.fake.sent] == [c.text for c in chunks]


async def test_reply_in_thread_goes_into_the_thread(rig: DiscordRig) -> None:
    trigger = await rig.say(rig.thread, "in thread", mentions=[rig.mention()])
    got = await rig.next_inbound()
    msg = outbound(rig, "answer", chat_id=got.chat_id, thread_id=got.thread_id,
                   reply_to_id=got.message_id)
    await ch(rig).send_chunk(msg, Chunk("answer", "answer"), 0)
    [sent] = rig.fake.sent
    assert sent["channel_id"] == rig.thread["id"]
    assert sent["message_reference"]["message_id"] == trigger["id"]
    assert sent["message_reference"]["channel_id"] == rig.thread["id"]


async def test_reply_to_a_deleted_message_still_sends(rig: DiscordRig) -> None:
    # fail_if_not_exists=False: Discord drops the reference instead of answering 400
    msg = outbound(rig, "late answer", reply_to_id="1234")
    await ch(rig).send_chunk(msg, Chunk("late answer", "late answer"), 0)
    [sent] = rig.fake.sent
    assert sent["content"] == "late answer"
    assert "message_reference" not in sent


async def test_long_429_surfaces_as_rate_limited(rig: DiscordRig) -> None:
    rig.fake.fail_rate_limited(rig.general["id"], retry_after=64.5)
    with pytest.raises(RateLimited) as err:
        await ch(rig).send_chunk(outbound(rig, "x"), Chunk("x", "x"), 0)
    assert err.value.retry_after == pytest.approx(64.5)
    assert rig.fake.sent == []


async def test_short_429_is_not_slept_on_inside_the_call(rig: DiscordRig) -> None:
    # discord.py alone would sleep 0.05 s and retry; the outbox must see the 429
    rig.fake.fail_rate_limited(rig.general["id"], retry_after=0.05)
    with pytest.raises(RateLimited) as err:
        await ch(rig).send_chunk(outbound(rig, "x"), Chunk("x", "x"), 0)
    assert err.value.retry_after == pytest.approx(0.05)
    posts = [r for r in rig.fake.requests if r[0] == "POST"]
    assert len(posts) == 1
    assert rig.fake.sent == []
    # the outbox's retry goes through (the library's bucket is not left blocked)
    await ch(rig).send_chunk(outbound(rig, "x"), Chunk("x", "x"), 0)
    assert len(rig.fake.sent) == 1


async def test_cloudflare_429_uses_retry_after_header(rig: DiscordRig) -> None:
    # Cloudflare's own 429 (an IP-level block) is an HTML page with only the header
    rig.fake.fail_next("POST", rig.general["id"], 429,
                       "<html><body>Error 1015: You are being rate limited</body></html>",
                       {"Retry-After": "17"})
    with pytest.raises(RateLimited) as err:
        await ch(rig).send_chunk(outbound(rig, "x"), Chunk("x", "x"), 0)
    assert err.value.retry_after == 17.0


async def test_missing_permissions_is_permanent(rig: DiscordRig) -> None:
    rig.fake.fail_next("POST", rig.general["id"], 403,
                       {"message": "Missing Permissions", "code": 50013})
    with pytest.raises(PermanentError) as err:
        await ch(rig).send_chunk(outbound(rig, "x"), Chunk("x", "x"), 0)
    assert err.value.reason == "missing_permissions"
    assert "Missing Permissions" in str(err.value)


async def test_unknown_channel_is_permanent(rig: DiscordRig) -> None:
    with pytest.raises(PermanentError) as err:
        await ch(rig).send_chunk(outbound(rig, "x", chat_id="42"), Chunk("x", "x"), 0)
    assert err.value.reason == "unknown_channel"


@pytest.mark.parametrize("status", [500, 502, 503])
async def test_server_error_is_transient_and_not_retried_inside(
    rig: DiscordRig, status: int
) -> None:
    rig.fake.fail_next("POST", rig.general["id"], status, {"message": "upstream", "code": 0})
    with pytest.raises(TransientError) as err:
        await ch(rig).send_chunk(outbound(rig, "x"), Chunk("x", "x"), 0)
    assert not isinstance(err.value, RateLimited)
    assert len([r for r in rig.fake.requests if r[0] == "POST"]) == 1
    assert rig.fake.sent == []


async def test_unreachable_discord_is_network_error(rig: DiscordRig) -> None:
    await rig.fake.stop()
    with pytest.raises(NetworkError):
        await ch(rig).send_chunk(outbound(rig, "x"), Chunk("x", "x"), 0)


async def test_bad_ids_are_permanent(rig: DiscordRig) -> None:
    with pytest.raises(PermanentError) as err:
        await ch(rig).send_chunk(outbound(rig, "x", chat_id="general"), Chunk("x", "x"), 0)
    assert err.value.reason == "bad_chat_id"


async def test_send_before_start_is_a_network_error(rig: DiscordRig) -> None:
    fresh = rig.make_channel()
    with pytest.raises(NetworkError):
        await fresh.send_chunk(outbound(rig, "x"), Chunk("x", "x"), 0)


async def test_typing_goes_to_the_thread_or_channel(rig: DiscordRig) -> None:
    await ch(rig).typing(rig.general["id"])
    await ch(rig).typing(rig.general["id"], rig.thread["id"])
    assert rig.fake.typing == [rig.general["id"], rig.thread["id"]]
    rig.fake.fail_next("POST", rig.general["id"], 403,
                       {"message": "Missing Access", "code": 50001}, route="typing")
    with pytest.raises(PermanentError) as err:
        await ch(rig).typing(rig.general["id"])
    assert err.value.reason == "missing_access"
