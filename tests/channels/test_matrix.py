"""Matrix adapter specifics beyond the contract kit, against the fake client-server API
with the real matrix-nio client: history not replayed, resume from the stored token,
idempotent sends, invite policy, config errors, reply fallbacks."""

from __future__ import annotations

import asyncio
import logging
import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from channels.base import ChannelContext
from channels.errors import PermanentError, RateLimited
from channels.matrix import MatrixChannel, MatrixSettings, transaction_id
from channels.matrix import channel as matrix_channel
from channels.matrix.normalize import BotIdentity, RoomView, normalize_event, strip_reply_fallback
from channels.matrix.session import SESSION_FILE, Session, load_session, save_session
from channels.matrix.syncer import TOKEN_KEY, Syncer
from channels.models import Outbound
from tests.channels.harness_matrix import DM, GROUP, block, env, matrix_harness, new_fake
from tests.channels.kit import MemoryCursorStore, RecordingSink, load_fixture
from tests.fakes.matrix_api import ACCESS_TOKEN, BOT, DEVICE, failure_for


async def test_first_start_does_not_replay_history_and_stores_the_token() -> None:
    async with matrix_harness() as h:
        await h.inject("dm_text")
        [got] = await h.sink.wait_for(1)
        assert got.message_id == "$d1"  # not "$old1", the history of the initial sync
        assert await h.cursors.get(TOKEN_KEY) == "s1"
        assert h.fake.syncs[0].get("since") is None


async def test_restart_resumes_at_the_stored_token(tmp_path: Path) -> None:
    fake = new_fake()
    await fake.start()
    cursors = MemoryCursorStore()
    try:
        first = MatrixChannel.from_config("default", block(fake, tmp_path), env())
        first.bind(cursors)
        sink = RecordingSink()
        await first.start(sink)
        await fake.enqueue(load_fixture("matrix", "group_plain"))
        await sink.wait_for(1)
        await first.stop()
        await fake.enqueue(load_fixture("matrix", "dm_text"))  # while the bot is down

        second = MatrixChannel.from_config("default", block(fake, tmp_path), env())
        second.bind(cursors)
        later = RecordingSink()
        await second.start(later)
        got = await later.wait_for(1)
        await second.stop()
    finally:
        await fake.stop()
    assert [i.message_id for i in got] == ["$d1"]  # nothing lost, nothing replayed
    # the restart resumed at the stored token, rebuilding room state (full_state)
    assert any(s.get("since") == "s1" and s.get("full_state") == "true" for s in fake.syncs)


async def test_session_is_stored_private_and_reused(tmp_path: Path) -> None:
    async with matrix_harness(store_dir=str(tmp_path)) as h:
        assert h.channel._client.device_id == DEVICE
    path = tmp_path / SESSION_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    session = load_session(tmp_path, h.fake.base_url, BOT)
    assert session is not None and session.device_id == DEVICE
    assert ACCESS_TOKEN not in repr(session)


async def test_a_retried_chunk_reuses_its_transaction_id() -> None:
    async with matrix_harness() as h:
        out = Outbound(channel="matrix", chat_id=DM, text="hello", reply_id="turn-7")
        [chunk] = h.channel.render(out.text)
        one = await h.channel.send_chunk(out, chunk, 0)
        two = await h.channel.send_chunk(out, chunk, 0)
        assert one == two and len(h.fake.sent) == 1
        assert h.fake.sent[0]["txn"] == transaction_id("turn-7", 0)
        assert transaction_id("turn-7", 1) != transaction_id("turn-7", 0)
        assert transaction_id("turn-8", 0) != transaction_id("turn-7", 0)


async def test_rate_limit_reports_the_servers_retry_after_ms() -> None:
    async with matrix_harness() as h:
        out = Outbound(channel="matrix", chat_id=GROUP, text="hi", reply_id="r")
        h.fake.fail_next_send(failure_for(429, 2.5))
        with pytest.raises(RateLimited) as caught:
            await h.channel.send_chunk(out, h.channel.render("hi")[0], 0)
        assert caught.value.retry_after == pytest.approx(2.5)


def _syncer(**settings: object) -> Syncer:
    config = MatrixSettings.model_validate(
        {"homeserver": "http://127.0.0.1:1", "user_id": BOT, **settings}
    )
    return Syncer(None, config, None, RecordingSink(), None)  # type: ignore[arg-type]


def test_invite_policy() -> None:
    allow = _syncer(invite_allow=["@ann:example.org", ":trusted.org", "!room:example.org"])
    assert allow.invite_allowed("!x:example.org", "@ann:example.org")
    assert allow.invite_allowed("!x:example.org", "@anyone:trusted.org")
    assert allow.invite_allowed("!room:example.org", "@stranger:evil.org")
    assert not allow.invite_allowed("!x:example.org", "@stranger:evil.org")
    assert not allow.invite_allowed("!x:example.org", "@ann:example.org.evil.org")
    assert not allow.invite_allowed("!x:example.org", None)
    assert _syncer(auto_join="open").invite_allowed("!x:example.org", "@stranger:evil.org")
    assert not _syncer(auto_join="off", invite_allow=["@ann:example.org"]).invite_allowed(
        "!x:example.org", "@ann:example.org"
    )


def test_config_errors_name_the_key_and_the_fix(tmp_path: Path) -> None:
    base = {"homeserver": "https://matrix.example.org", "user_id": BOT}
    with pytest.raises(ValueError, match="MATRIX_ACCESS_TOKEN"):
        MatrixChannel.from_config("default", {**base, "store_dir": str(tmp_path)}, {})
    with pytest.raises(ValueError, match="store_dir"):
        MatrixChannel.from_config("default", base, {"MATRIX_PASSWORD": "pw"})
    with pytest.raises(ValueError, match="user_id"):
        MatrixSettings.model_validate({**base, "user_id": "claw"})
    with pytest.raises(ValueError, match="homeserver"):
        MatrixSettings.model_validate({**base, "homeserver": "matrix.example.org"})
    channel = MatrixChannel.from_config(
        "default", base, {"MATRIX_PASSWORD": "pw-Zq81"}, ChannelContext(data_dir=tmp_path)
    )
    assert channel.store_dir == tmp_path / "matrix" / "default"
    assert "pw-Zq81" not in repr(channel) and "pw-Zq81" not in repr(vars(channel))


async def test_refused_token_is_a_clear_permanent_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake = new_fake()
    await fake.start()
    try:
        channel = MatrixChannel.from_config(
            "default", block(fake, tmp_path), {"MATRIX_ACCESS_TOKEN": "syt_wrong_token_Zq81"}
        )
        with pytest.raises(Exception, match="unauthorized") as caught:
            await channel.start(RecordingSink())
    finally:
        await fake.stop()
    assert "syt_wrong_token_Zq81" not in str(caught.value) + caplog.text


def test_reply_fallback_is_stripped() -> None:
    got = strip_reply_fallback("> <@a:x.org> quoted\n> more\n\nmy answer\nline two")
    assert (got.text, got.quoted, got.quoted_sender) == (
        "my answer\nline two", "quoted\nmore", "@a:x.org"
    )
    plain = strip_reply_fallback("> not a fallback without the blank line\nstill text")
    assert plain.text.startswith("> not") and plain.quoted is None


async def test_invites_follow_the_policy_and_a_kick_is_logged_and_forgotten(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="channels.matrix")
    async with matrix_harness(invite_allow=["@alice:example.org"]) as h:
        for fixture in ("invite_from_alice", "invite_from_stranger", "kicked", "dm_text"):
            await h.inject(fixture)
        await h.sink.wait_for(1)  # the marker after them: they were all handled
        assert h.fake.memberships == [
            ("join", "!new1:example.org"),
            ("leave", "!new2:elsewhere.org"),
            ("forget", "!group:example.org"),
        ]
    kicks = [r.getMessage() for r in caplog.records if "removed from room" in r.getMessage()]
    assert kicks == ["matrix: removed from room !group:example.org by @alice:example.org "
                     "(too chatty)"]


async def test_a_rate_limited_sync_waits_and_loses_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="channels.matrix")
    async with matrix_harness() as h:
        h.fake.fail_next_sync(failure_for(429, 0.2))
        h.fake.fail_next_sync(failure_for(500))
        await h.inject("dm_text")
        [got] = await h.sink.wait_for(1)
        assert got.message_id == "$d1"
    assert any("waiting 0.2s as asked" in r.getMessage() for r in caplog.records)


def test_is_group_comes_from_membership_not_the_name() -> None:
    event = load_fixture("matrix", "dm_text")["rooms"]["join"][DM]["timeline"]["events"][0]
    bot = BotIdentity(BOT, "Claw")
    named_pair = RoomView(DM, "Project X", members=2)
    unnamed_trio = RoomView(DM, None, members=3)
    pair = normalize_event(event, named_pair, bot)
    trio = normalize_event(event, unnamed_trio, bot)
    assert pair is not None and pair.is_group is False and pair.chat_name == "Project X"
    assert trio is not None and trio.is_group is True


async def test_a_revoked_stored_session_is_reported_clearly(tmp_path: Path) -> None:
    fake = new_fake()
    await fake.start()
    try:
        save_session(tmp_path, Session(fake.base_url, BOT, DEVICE, SecretStr("syt_revoked_Zq81")))
        # no token or password configured: the stored session alone is enough to start
        channel = MatrixChannel.from_config("default", block(fake, tmp_path), {})
        with pytest.raises(PermanentError, match="MATRIX_PASSWORD") as caught:
            await channel.start(RecordingSink())
    finally:
        await fake.stop()
    assert "syt_revoked_Zq81" not in str(caught.value)


class _NeverClosing:
    """An HTTP session whose close never finishes (a connection that will not let go)."""

    async def close(self) -> None:
        await asyncio.Event().wait()


async def test_stop_returns_when_the_http_session_is_slow_to_close(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(matrix_channel, "STOP_WAIT", 0.2)
    async with matrix_harness() as h:
        client = h.channel._client
        real, client.client_session = client.client_session, _NeverClosing()
        try:
            # a shutdown path: the slow close is given up on, never raised out of stop()
            await h.channel.stop()
        finally:
            client.client_session = real  # the harness's own stop closes the real one
        assert h.channel._task is None
