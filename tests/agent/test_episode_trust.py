"""Episode trust comes from the least trusted words the turn records."""

from __future__ import annotations

from channels.models import Inbound
from workers.prompt import QUOTED_TRUST, content_trust
from workers.turn import episode_trust


def _msg(mid: str, sender: str, *, group: bool = True, forwarded: str | None = None,
         quoted: str | None = None) -> Inbound:
    return Inbound(channel="telegram", chat_id="-100", is_group=group, sender_id=sender,
                   sender_name=sender, message_id=mid, text="hi", forwarded_from=forwarded,
                   reply_to_text=quoted)


def test_plain_member_batch_has_member_trust() -> None:
    batch = [_msg("1", "ann"), _msg("2", "bob")]
    assert episode_trust(batch) == content_trust(batch[0])
    assert episode_trust(batch) > QUOTED_TRUST


def test_a_forward_lowers_the_episode_to_quoted_trust_even_from_an_admin() -> None:
    admin_forward = _msg("2", "boss", forwarded="channel @news")
    batch = [_msg("1", "boss"), admin_forward]
    assert episode_trust(batch, admins={"telegram:boss"}) == QUOTED_TRUST
    assert episode_trust([_msg("1", "boss")], admins={"telegram:boss"}) > QUOTED_TRUST


def test_a_quote_lowers_it_too_and_dm_owner_ranks_above_members() -> None:
    assert episode_trust([_msg("1", "ann", quoted="someone said")]) == QUOTED_TRUST
    assert episode_trust([_msg("1", "ann", group=False)]) > episode_trust([_msg("1", "ann")])
