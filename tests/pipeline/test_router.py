"""Router decisions: policies and engage rules."""

from __future__ import annotations

from typing import Any

from channels.models import Inbound
from gateway.config import parse_config
from gateway.intake import Disposition, Router


def msg(**kw: Any) -> Inbound:
    base: dict[str, Any] = {"channel": "telegram", "chat_id": "-100", "is_group": True,
                            "sender_id": "7", "sender_name": "Ann", "message_id": "1",
                            "text": "hello"}
    return Inbound(**{**base, **kw})


def router(doc: dict[str, Any]) -> Router:
    return Router(parse_config(doc, env={}))


def test_dm_always_engages() -> None:
    assert router({}).route(msg(is_group=False, chat_id="7")).disposition is Disposition.ENGAGE


def test_group_default_needs_a_mention() -> None:
    r = router({})
    assert r.route(msg()).disposition is Disposition.CONTEXT
    assert r.route(msg(mentions_bot=True)).disposition is Disposition.ENGAGE


def test_trigger_words_are_whole_words_case_insensitive() -> None:
    r = router({"engage": {"trigger_words": ["claw"]}})
    assert r.route(msg(text="Hey CLAW!")).disposition is Disposition.ENGAGE
    assert r.route(msg(text="clawback")).disposition is Disposition.CONTEXT


def test_trigger_mode_ignores_plain_mentions() -> None:
    r = router({"engage": {"default": "trigger", "trigger_words": ["claw"]}})
    assert r.route(msg(mentions_bot=True)).disposition is Disposition.CONTEXT
    assert r.route(msg(text="claw?")).disposition is Disposition.ENGAGE


def test_per_group_always_override() -> None:
    r = router({"groups": {"telegram:-100": {"engage": "always"}}})
    assert r.route(msg()).disposition is Disposition.ENGAGE
    assert r.route(msg(chat_id="-200")).disposition is Disposition.CONTEXT


def test_allowlists() -> None:
    r = router({"policy": {"dm": "allowlist", "groups": "allowlist",
                           "allow": ["telegram:-100", "telegram:9"], "admins": ["telegram:42"]}})
    assert r.route(msg(mentions_bot=True)).disposition is Disposition.ENGAGE
    assert r.route(msg(chat_id="-200", mentions_bot=True)).disposition is Disposition.DROP
    assert r.route(msg(is_group=False, chat_id="9", sender_id="9")).disposition \
        is Disposition.ENGAGE
    assert r.route(msg(is_group=False, chat_id="5", sender_id="5")).disposition \
        is Disposition.DROP
    assert r.route(msg(is_group=False, chat_id="42", sender_id="42")).disposition \
        is Disposition.ENGAGE
    # an allowed group does not let its members DM the bot
    assert r.route(msg(is_group=False, chat_id="7", sender_id="7")).disposition \
        is Disposition.DROP


def test_edits_and_deletions_never_engage_or_join_the_context() -> None:
    r = router({"engage": {"default": "always"}})
    for kind in ("edit", "deletion"):
        for is_group in (True, False):
            m = msg(kind=kind, original_id="1", message_id="1:x", is_group=is_group,
                    chat_id="-100" if is_group else "7", mentions_bot=True)
            assert r.route(m).disposition is Disposition.CHANGE, (kind, is_group)


def test_an_edit_from_a_sender_not_allowed_is_dropped() -> None:
    r = router({"policy": {"dm": "allowlist", "groups": "allowlist", "allow": ["telegram:-100"]}})
    edit = {"kind": "edit", "original_id": "1", "message_id": "1:x"}
    assert r.route(msg(chat_id="-200", **edit)).disposition is Disposition.DROP
    assert r.route(msg(chat_id="-100", **edit)).disposition is Disposition.CHANGE
    assert r.route(msg(is_group=False, chat_id="7", sender_id="7", **edit)).disposition \
        is Disposition.DROP
    # a deletion carries no words: it only ever touches its own chat's messages
    deletion = {"kind": "deletion", "original_id": "1", "message_id": "1:d", "text": ""}
    assert r.route(msg(is_group=False, chat_id="7", sender_id="", **deletion)).disposition \
        is Disposition.CHANGE


def test_pairing_admits_listed_and_paired_dms_only() -> None:
    r = router({"policy": {"dm": "pairing", "allow": ["telegram:8"]}})
    stranger = msg(is_group=False, chat_id="7")
    assert r.route(stranger).disposition is Disposition.DROP  # fails closed by default
    assert r.route(stranger, paired=True).disposition is Disposition.ENGAGE
    listed = msg(is_group=False, chat_id="8", sender_id="8")
    assert r.route(listed).disposition is Disposition.ENGAGE
    # "paired" means nothing under the other policies
    strict = router({"policy": {"dm": "allowlist"}})
    assert strict.route(stranger, paired=True).disposition is Disposition.DROP


def test_an_unauthenticated_sender_is_a_stranger_to_every_policy_but_open() -> None:
    """Mail whose From the receiving server did not authenticate: its sender id is a
    claim, so no allowlist, admin entry or pairing lets it in, in a DM or a group."""
    forged = msg(channel="email", chat_id="u-1", sender_id="ada@example.org",
                 authenticated=False, mentions_bot=True)
    listed = {"allow": ["email:ada@example.org", "email:u-1"],
              "admins": ["email:ada@example.org"]}
    for dm in ("allowlist", "pairing"):
        r = router({"policy": {"dm": dm, "groups": "open", **listed}})
        assert r.route(forged, paired=True).disposition is Disposition.DROP
        assert r.route(forged.model_copy(update={"is_group": False}),
                       paired=True).disposition is Disposition.DROP
        real = forged.model_copy(update={"authenticated": True, "is_group": False})
        assert r.route(real).disposition is Disposition.ENGAGE
    r = router({"policy": {"dm": "open", "groups": "open"}})
    assert r.route(forged).disposition is Disposition.ENGAGE
