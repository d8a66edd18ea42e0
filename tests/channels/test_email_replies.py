"""Who a reply goes to, against a real dovecot with the real channel: a Message-ID is
the sender's choice, so a forger can reuse the one of someone's real mail. The reply
in the real thread still goes to its people, and the forged one's to its From alone."""

from __future__ import annotations

import pytest

from channels.models import Outbound
from tests.channels.harness_email import BOT, append, started_channel
from tests.fakes import dovecot

pytestmark = pytest.mark.skipif(dovecot.should_skip(), reason=dovecot.SKIP_REASON)


def mail(auth: str, cc: str) -> bytes:
    return (
        f"{auth}From: Ada <ada@example.org>\r\nTo: {BOT}\r\nCc: {cc}\r\n"
        "Subject: Plans\r\nMessage-ID: <dup-1@example.org>\r\n"
        "Content-Type: text/plain\r\n\r\nClaw, the plan?\r\n"
    ).encode()


async def test_a_reused_message_id_never_swaps_the_recipients() -> None:
    async with started_channel() as h:
        await append(h.admin, mail("Authentication-Results: mx.pnc.test; dmarc=pass "
                                   "header.from=example.org\r\n", "bob@example.com"))
        await append(h.admin, mail("", "mallory@evil.test"))  # newer, unauthenticated
        real, forged = await h.sink.wait_for(2)
        assert real.authenticated and not forged.authenticated
        assert real.chat_id != forged.chat_id
        for inbound, reply_id in ((real, "r-real"), (forged, "r-forged")):
            out = Outbound(channel="email", chat_id=inbound.chat_id, text="The plan.",
                           reply_to_id="dup-1@example.org", reply_id=reply_id)
            await h.channel.send_chunk(out, h.channel.render(out.text)[0], 0)
        with h.smtp.lock:
            rcpts = [sorted(r) for _, r, _ in h.smtp.received]
    # and the bot's own address, for the copy that proves the send (never in a header)
    assert rcpts == [["ada@example.org", "bob@example.com", BOT], ["ada@example.org", BOT]]
