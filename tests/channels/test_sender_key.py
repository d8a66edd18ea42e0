"""``Inbound.sender_key``: the one spelling of "who sent it" (``<channel>:<sender id>``)
that ``[policy] admins``, allowlists, pairing and identity links are written in."""

from __future__ import annotations

from channels.models import Inbound
from workers.prompt import Role, role_of


def _msg(**over: object) -> Inbound:
    fields: dict[str, object] = {
        "channel": "telegram", "account": "work", "chat_id": "-100", "is_group": True,
        "sender_id": "42", "sender_name": "Ada", "message_id": "7", "text": "hi"}
    return Inbound.model_validate({**fields, **over})


def test_sender_key_is_channel_and_sender_id_whatever_the_account_or_chat() -> None:
    assert _msg().sender_key == "telegram:42"
    assert _msg(account="default", chat_id="9").sender_key == "telegram:42"
    assert _msg(channel="signal", sender_id="+15550001000").sender_key == "signal:+15550001000"


def test_an_admin_written_as_sender_key_is_the_operator() -> None:
    assert role_of(_msg(), admins={"telegram:42"}) is Role.OPERATOR
    assert role_of(_msg(), admins={"telegram:43", "signal:42"}) is Role.MEMBER
