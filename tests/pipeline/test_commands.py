"""The chat command layer: parsing, the permission table, honest handlers."""

from __future__ import annotations

from typing import Any

import pytest

from channels.models import Inbound
from gateway.config import Settings, parse_config
from gateway.intake import COMMANDS, ChatKind, SenderRole, commands, parse_command, roles_of

OPERATOR = "telegram:1"


def cfg(**policy: Any) -> Settings:
    return parse_config({"policy": {"admins": [OPERATOR], **policy}}, env={})


def msg(text: str, **kw: Any) -> Inbound:
    base: dict[str, Any] = {"channel": "telegram", "chat_id": "-100", "is_group": True,
                            "sender_id": "7", "sender_name": "Ann", "message_id": "1",
                            "text": text}
    return Inbound(**{**base, **kw})


def test_plain_text_commands_parse_with_arguments() -> None:
    assert parse_command(msg("/Forget  everything please")) == commands.ParsedCommand(
        "forget", "everything please")
    assert parse_command(msg("/help")) == commands.ParsedCommand("help", "")


def test_ordinary_text_and_unknown_commands_are_not_commands() -> None:
    for text in ("hello /help", "/usr/bin/env", "/shrug", "/", "help"):
        assert parse_command(msg(text)) is None, text


def test_command_addressed_to_a_named_bot_in_plain_text_is_left_alone() -> None:
    assert parse_command(msg("/help@otherbot")) is None
    # the adapter resolves its own bot's name: Telegram sets Inbound.command
    assert parse_command(msg("/help@claw_bot", command="help")) == commands.ParsedCommand(
        "help", "")


def test_forwarded_commands_and_edits_are_not_commands() -> None:
    assert parse_command(msg("/forget confirm", forwarded_from="Eve (telegram user 9)")) is None
    assert parse_command(msg("/forget confirm", kind="edit", original_id="1")) is None


def test_roles_come_from_structure() -> None:
    c = cfg()
    assert roles_of(msg("x"), c) == {SenderRole.MEMBER}
    assert roles_of(msg("x", is_admin=True), c) == {SenderRole.MEMBER, SenderRole.CHAT_ADMIN}
    assert roles_of(msg("x", is_group=False, chat_id="7"), c) == {SenderRole.MEMBER,
                                                                  SenderRole.DM_OWNER}
    assert SenderRole.OPERATOR in roles_of(msg("x", sender_id="1"), c)
    # the same user id on another platform is somebody else
    assert SenderRole.OPERATOR not in roles_of(msg("x", channel="slack", sender_id="1"), c)


def test_a_member_cannot_forget_group_memory_an_operator_and_chat_admin_can() -> None:
    c = cfg()
    refused = commands.run_command(msg("/forget confirm"), c)
    assert refused is not None and refused.startswith("Not allowed")
    for who in ({"sender_id": "1"}, {"is_admin": True}):
        # without the gateway's memory desk it says so and deletes nothing
        answer = commands.run_command(msg("/forget tea confirm", **who), c)
        assert answer is not None and "not available" in answer, who
        assert "nothing was deleted" in answer


def test_where_a_command_runs_is_enforced_even_for_operators() -> None:
    c = cfg()
    group_link = commands.run_command(msg("/link confirm", sender_id="1"), c)
    assert group_link is not None and "works in a DM only" in group_link
    group_share = commands.run_command(msg("/share profile on", sender_id="1"), c)
    assert group_share is not None and "works in a DM only" in group_share


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_answers_an_operator_in_a_place_it_allows(name: str) -> None:
    spec = COMMANDS[name]
    dm = ChatKind.DM in spec.where
    m = msg(f"/{name} confirm" if spec.confirm else f"/{name}", sender_id="1",
            is_group=not dm, chat_id="1" if dm else "-100")
    answer = commands.run_command(m, cfg())
    assert answer and not answer.startswith("Not allowed"), answer


def test_help_lists_only_what_the_sender_may_run_here() -> None:
    member = commands.run_command(msg("/help"), cfg())
    assert member is not None
    assert "/whoami" in member and "/forget" not in member and "/link" not in member
    operator = commands.run_command(msg("/help", sender_id="1"), cfg())
    assert operator is not None and "/forget" in operator and "/share" not in operator
    dm = commands.run_command(msg("/help", is_group=False, chat_id="7"), cfg())
    assert dm is not None and "/link" in dm and "/share" in dm


def test_whoami_reports_identity_and_roles() -> None:
    answer = commands.run_command(msg("/whoami", is_admin=True), cfg())
    assert answer == ("You are Ann (telegram:7) in telegram:-100; your roles here: "
                      "chat admin, member.")


def test_whoami_lists_config_linked_identities_in_a_dm_only() -> None:
    c = parse_config({"identities": {"ann": {"members": ["slack:U7", "telegram:7"]}}}, env={})
    answer = commands.run_command(msg("/whoami", is_group=False, chat_id="7"), c)
    assert answer == ("You are Ann (telegram:7) in telegram:7; your roles here: DM owner, "
                      "member. Linked identities (person ann): telegram:7, slack:U7.")
    in_group = commands.run_command(msg("/whoami"), c)
    assert in_group is not None and "slack:U7" not in in_group


def test_share_and_link_need_the_store_and_say_how() -> None:
    share = commands.run_command(msg("/share profile maybe", is_group=False, chat_id="7"), cfg())
    assert share is not None and share.startswith("Usage: /share profile on|off")
    link = commands.run_command(msg("/link", is_group=False, chat_id="7"), cfg())
    assert link == "/link needs the gateway's Redis: nothing was linked."


def test_registry_names_fit_telegram_rules() -> None:
    for name, description in commands.registry_entries():
        assert commands._NAME.fullmatch(name) and 3 <= len(description) <= 256


def test_a_dm_owner_previews_forget_of_their_own_memory(tmp_path: Any) -> None:
    from gateway.intake import MemoryDesk
    from gateway.queue import Keys
    from memory_store import open_memory

    c = parse_config({"data_dir": str(tmp_path), "policy": {"admins": [OPERATOR]}}, env={})
    mem = open_memory(tmp_path, "telegram:7")
    mem.write_sync("Ann likes green tea", kind="fact", metadata={"id": "f1"})
    for i in range(3):
        mem.write_sync(f"Ann: message {i}", kind="episode", metadata={"id": f"e{i}"})
    mem.close()
    desk = MemoryDesk(c, None, Keys())  # type: ignore[arg-type]  # a preview enqueues nothing
    dm = {"is_group": False, "chat_id": "7"}
    answer = commands.run_command(msg("/forget Green Tea", **dm), c, desk)
    assert answer is not None and "fact f1" in answer
    assert "/forget <your words> confirm" in answer
    short = commands.run_command(msg("/forget ab", **dm), c, desk)
    assert short is not None and "at least 3 characters" in short
    listing = commands.run_command(msg("/memory", **dm), c, desk)
    assert listing is not None and "Ann likes green tea (from memory_store" in listing
    assert "- 3 episodes, 1 fact\n" in listing  # episodes counted, not parsed


def _desk(tmp_path: Any) -> tuple[Settings, Any]:
    from gateway.intake import MemoryDesk
    from gateway.queue import Keys

    c = parse_config({"data_dir": str(tmp_path), "policy": {"admins": [OPERATOR]}}, env={})
    return c, MemoryDesk(c, None, Keys())  # type: ignore[arg-type]  # reads only


def test_the_forget_preview_does_not_quote_the_words_back(tmp_path: Any) -> None:
    from memory_store import open_memory

    c, desk = _desk(tmp_path)
    mem = open_memory(tmp_path, "telegram:7")
    # an entity named after the words: its id and path hold them too
    mem.write_sync("The 4417 Zanzibar door is green", kind="entity",
                   metadata={"id": "4417-zanzibar-door"})
    mem.write_sync("Ann: my door code is 4417 Zanzibar", kind="episode",
                   metadata={"id": "e1"})
    mem.close()
    dm = {"is_group": False, "chat_id": "7"}
    found = commands.run_command(msg("/forget 4417   ZANZIBAR", **dm), c, desk)
    assert found is not None and found.startswith(
        "Your words (2 words, 13 characters) appear 2 times in 2 memories of telegram:7")
    assert "- entity ***-***-door (entities/***-***-door.md; from" in found
    missing = commands.run_command(msg("/forget door code 9999", **dm), c, desk)
    assert missing is not None and missing.startswith("Nothing in the memory")
    for answer, words in ((found, ("4417", "zanzibar")), (missing, ("9999", "door code"))):
        for word in words:
            assert word not in answer.lower(), (word, answer)


def test_memory_counts_live_memories_only_in_plural(tmp_path: Any) -> None:
    from memory_store import open_memory

    c, desk = _desk(tmp_path)
    mem = open_memory(tmp_path, "telegram:7")
    mem.write_sync("Ann likes green tea", kind="fact", metadata={"id": "f1"})
    mem.write_sync("Ann likes black tea", kind="fact",
                   metadata={"id": "f2", "valid_to": "2026-01-01T00:00:00Z",
                             "superseded_reason": "forgotten"})
    for i in range(2):
        mem.write_sync(f"Ann: message {i}", kind="episode", metadata={"id": f"e{i}"})
    mem.write_sync("Ann is a person", kind="entity", metadata={"id": "ann"})
    mem.write_sync("Bob is a person", kind="entity", metadata={"id": "bob"})
    mem.close()
    listing = commands.run_command(msg("/memory", is_group=False, chat_id="7"), c, desk)
    assert listing is not None
    assert "- 2 entities, 2 episodes, 1 fact (1 retired memory not counted)\n" in listing
    assert "black tea" not in listing


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_bounds_its_arguments(name: str) -> None:
    spec = COMMANDS[name]
    dm = ChatKind.DM in spec.where
    words = "zanzibar " * 2500  # 22,500 characters
    answer = commands.run_command(msg(f"/{name} {words}confirm", sender_id="1", is_group=not dm,
                                      chat_id="1" if dm else "-100"), cfg())
    assert answer is not None and "at most 300" in answer and "Nothing was done" in answer
    assert len(answer) < 200 and "zanzibar" not in answer
    fits = commands.run_command(msg(f"/{name} {'x' * 292} confirm", sender_id="1",
                                    is_group=not dm, chat_id="1" if dm else "-100"), cfg())
    assert fits is not None and "at most" not in fits


def test_an_unknown_command_is_answered_in_a_dm_and_left_alone_in_a_group() -> None:
    answer = commands.run_command(msg("/frobnicate now", is_group=False, chat_id="7"), cfg())
    assert answer is not None and answer.startswith("Unknown command /frobnicate.")
    assert "/help: " in answer and "/link: " in answer and "/forget: " in answer
    # in a group it may be meant for another bot: ordinary text for the model
    assert parse_command(msg("/frobnicate now")) is None
    assert commands.run_command(msg("/frobnicate now"), cfg()) is None
    # still not commands in a DM: a path, a command addressed to another bot by name,
    # Telegram's /start (sent when someone opens the chat: a hello for the model)
    for text in ("/usr/bin/env", "/help@otherbot", "hello /frobnicate", "/start"):
        assert parse_command(msg(text, is_group=False, chat_id="7")) is None, text
