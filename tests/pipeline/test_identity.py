"""Personal memory that follows a person (issue 13): real Valkey, real worker processes,
the gateway in-process; the scripted model records every prompt it was given.

DMs on two channels are linked by the config, then by ``/link`` codes: a fact told on
one is in the other's prompt; a group turn with the person present never sees it, and
sees their profile only once they said ``/share profile on``."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from channels.models import Inbound
from gateway.app import CHANNEL_REGISTRY
from memory_store import GroupDirectory, InvalidGroupKey, group_dir, person_key
from memory_store.files import PERSON_CHANNEL, persons_root
from tests.pipeline.conftest import Stack, Valkey

FACT = "my boat is called SEAGULL7"
QUESTION = "what is my boat called?"
PROFILE = "Ada prefers PROFILEFACT sailing talk."
CODE = re.compile(r"link code is ([A-Z0-9]{8})")


def dm(channel: str, chat: str, user: str, mid: str, text: str) -> Inbound:
    return Inbound(channel=channel, chat_id=chat, is_group=False, sender_id=user,
                   sender_name="Ada", message_id=mid, text=text)


def in_group(mid: str, text: str, user: str = "42") -> Inbound:
    return Inbound(channel="telegram", chat_id="-100", is_group=True, sender_id=user,
                   sender_name="Ada" if user == "42" else "Bo", message_id=mid, text=text,
                   mentions_bot=True)


async def turn(stack: Stack, msg: Inbound) -> dict[str, Any]:
    """Send ``msg`` through the gateway; the prompt of the turn that answered it."""
    gw = stack.gateway
    assert gw is not None and gw.inbox is not None
    assert await gw.inbox.accept(msg) == "engage"
    await stack.settled(msg.group)
    found = [t for t in stack.turns() if msg.message_id in t["ids"]]
    assert found, f"no turn for {msg.message_id}"
    return found[-1]


async def command(stack: Stack, msg: Inbound) -> None:
    gw = stack.gateway
    assert gw is not None and gw.inbox is not None
    assert await gw.inbox.accept(msg) == "command"


def write_profile(stack: Stack, person: str) -> None:
    gd = GroupDirectory(stack.data_dir, person_key(person)).ensure()
    gd.profile_path.write_text(f"# People\n\n{PROFILE}\n", encoding="utf-8")


async def check_group_sees_profile_only_when_shared(stack: Stack, person: str,
                                                    share_from: Inbound) -> None:
    write_profile(stack, person)
    off = (await turn(stack, in_group("g1", QUESTION)))["prompt"]
    assert "SEAGULL7" not in off and "PROFILEFACT" not in off
    await command(stack, share_from)
    on = (await turn(stack, in_group("g2", QUESTION)))["prompt"]
    assert "PROFILEFACT" in on and f"persons/{person}/user_profile.md" in on
    assert "SEAGULL7" not in on  # the profile only, never the DM memory
    # another member's presence does not share anything of theirs, nor of Ada's DMs
    other = (await turn(stack, in_group("g3", QUESTION, user="77")))["prompt"]
    assert "PROFILEFACT" not in other and "SEAGULL7" not in other


LINKED = """
[identities.ada]
members = ["telegram:42", "slack:U0123"]
"""


async def test_config_linked_dms_share_one_memory_groups_never_see_it(
        tmp_path: Path, valkey: Valkey) -> None:
    stack = Stack(tmp_path, valkey, LINKED)
    try:
        stack.start_workers(1)
        await stack.start_gateway()
        told = await turn(stack, dm("telegram", "42", "42", "t1", FACT))
        assert told["group"] == "telegram:42"
        asked = await turn(stack, dm("slack", "D0999", "U0123", "s1", QUESTION))
        assert asked["group"] == "slack:D0999" and "SEAGULL7" in asked["prompt"]
        # one directory for both DMs, under persons/; the DMs' own directories hold none
        person = stack.data_dir / "persons" / "ada"
        assert len(list((person / "episodes").rglob("*.md"))) == 2
        for chat in ("telegram/42", "slack/D0999"):
            assert not list((stack.data_dir / "groups" / chat).rglob("episodes/**/*.md"))
        # an unlinked DM on the same channel does not see it
        stranger = await turn(stack, dm("slack", "D0777", "U0777", "s2", QUESTION))
        assert "SEAGULL7" not in stranger["prompt"]
        await check_group_sees_profile_only_when_shared(
            stack, "ada", dm("telegram", "42", "42", "c1", "/share profile on"))
        assert stack.r.hget("pnc:identity:share", "ada") == b"profile"
        await command(stack, dm("slack", "D0999", "U0123", "c2", "/share profile off"))
        off_again = (await turn(stack, in_group("g4", QUESTION)))["prompt"]
        assert "PROFILEFACT" not in off_again
    finally:
        await stack.close()


async def test_link_codes_join_two_dms_once_and_expire(tmp_path: Path,
                                                       valkey: Valkey) -> None:
    stack = Stack(tmp_path, valkey)
    try:
        stack.start_workers(1)
        gw = await stack.start_gateway()
        assert gw.inbox is not None
        asked = await stack.ask("ada", "ada", "/link", message_id="l1")
        assert asked.status == "command" and asked.reply is not None
        match = CODE.search(asked.reply)
        assert match, asked.reply
        code = match.group(1)
        # a wrong code does nothing but say so
        await command(stack, dm("telegram", "42", "42", "l2", "/link ZZZZZZZZ"))
        assert stack.r.hlen("pnc:identity:links") == 0
        # the code alone only says whose it is: nothing linked, the code still live
        await command(stack, dm("telegram", "42", "42", "l3a", f"/link {code}"))
        assert stack.r.hlen("pnc:identity:links") == 0
        await command(stack, dm("telegram", "42", "42", "l3", f"/link {code} confirm"))
        links = stack.r.hgetall("pnc:identity:links")
        person = links[b"local:ada"].decode()
        assert links == {b"local:ada": person.encode(), b"telegram:42": person.encode()}
        who = await stack.ask("ada", "ada", "/whoami", message_id="l4")
        assert who.reply is not None and "local:ada, telegram:42" in who.reply
        # reused: refused, nothing linked
        await command(stack, dm("slack", "D0999", "U0123", "l5", f"/link {code} confirm"))
        assert b"slack:U0123" not in stack.r.hgetall("pnc:identity:links")
        # expired: refused, nothing linked
        gw.inbox.front.identities.code_ttl = 1
        late = await stack.ask("ada", "ada", "/link", message_id="l6")
        assert late.reply is not None
        stale = CODE.search(late.reply)
        assert stale and "valid 1 minutes" in late.reply
        await asyncio.sleep(1.5)
        await command(stack, dm("slack", "D0999", "U0123", "l7",
                                     f"/link {stale.group(1)} confirm"))
        assert b"slack:U0123" not in stack.r.hgetall("pnc:identity:links")
        # the linked DMs share memory; the refused account does not
        await turn(stack, dm("telegram", "42", "42", "t1", FACT))
        same = await stack.ask("ada", "ada", QUESTION, message_id="q1")
        assert same.status == "engage"
        await stack.settled("local:ada")
        prompts = [t["prompt"] for t in stack.turns() if "q1" in t["ids"]]
        assert prompts and "SEAGULL7" in prompts[-1]
        refused = await turn(stack, dm("slack", "D0999", "U0123", "s1", QUESTION))
        assert "SEAGULL7" not in refused["prompt"]
        assert (stack.data_dir / "persons" / person).is_dir()
        await check_group_sees_profile_only_when_shared(
            stack, person, dm("telegram", "42", "42", "c1", "/share profile on"))
    finally:
        await stack.close()


@pytest.mark.parametrize("crafted", ["..", "../../etc", "a/../../b", "/abs", "x\x00y",
                                     "~2e~~2e~", ".", "a\\..\\b"])
def test_a_crafted_person_id_stays_under_persons(tmp_path: Path, crafted: str) -> None:
    path = group_dir(tmp_path, person_key(crafted))
    assert path.parent == persons_root(tmp_path)
    assert path.name not in {".", ".."} and "/" not in path.name


def test_person_keys_are_distinct_from_every_channel() -> None:
    assert PERSON_CHANNEL not in CHANNEL_REGISTRY
    with pytest.raises(InvalidGroupKey):
        person_key("")
    assert group_dir(Path("/d"), "telegram:person") != group_dir(Path("/d"), "person:telegram")


def test_link_refuses_own_code_and_never_merges_two_people(valkey: Valkey) -> None:
    import redis

    from gateway.config import parse_config
    from gateway.intake import IdentityStore
    from gateway.queue import Keys

    settings = parse_config({"identities": {"ada": {"members": ["telegram:42"]},
                                            "bo": {"members": ["slack:U2"]}}}, env={})
    with redis.Redis.from_url(valkey.url) as client:
        store = IdentityStore(settings, client, Keys())
        own = store.issue_code(dm("telegram", "42", "42", "a", "/link"))
        refused = store.redeem(own, dm("telegram", "42", "42", "b", f"/link {own}"))
        assert not refused.ok and "made for this account" in refused.text
        assert not store.redeem(own, dm("slack", "D3", "U3", "c", "x")).ok  # spent
        # a new code voids the previous one
        first = store.issue_code(dm("telegram", "42", "42", "d", "/link"))
        second = store.issue_code(dm("telegram", "42", "42", "e", "/link"))
        assert not store.redeem(first, dm("slack", "D3", "U3", "f", "x")).ok
        # two configured people are not merged by chat
        apart = store.redeem(second, dm("slack", "D2", "U2", "g", "x"))
        assert not apart.ok and store.person_of("slack:U2") == "bo"
        # an unlinked account joins the configured person; the config stays the source
        joined = store.redeem(store.issue_code(dm("telegram", "42", "42", "h", "")),
                              dm("slack", "D3", "U3", "i", "x"))
        assert joined.ok and joined.person == "ada"
        assert store.members("ada") == ["telegram:42", "slack:U3"]
        assert client.hgetall("pnc:identity:links") == {b"slack:U3": b"ada"}


async def test_a_persons_memory_is_consolidated_from_all_their_dms(
        tmp_path: Path, valkey: Valkey) -> None:
    stack = Stack(tmp_path, valkey, LINKED)
    text = stack.config_path.read_text(encoding="utf-8")
    stack.config_path.write_text(text.replace('backend = "file"',
                                              'backend = "file"\nconsolidate_every = 2'),
                                 encoding="utf-8")
    try:
        stack.start_workers(1)
        await stack.start_gateway()
        await turn(stack, dm("telegram", "42", "42", "t1", FACT))
        assert stack.r.get("pnc:episodes:person:ada") == b"1"
        await turn(stack, dm("slack", "D0999", "U0123", "s1", FACT))
        # two episodes of the person, from two DMs: one consolidation of persons/ada
        await stack.wait_for(lambda: stack.r.get("pnc:episodes:person:ada") == b"0"
                             and not stack.r.exists("pnc:consolidate:person:ada"),
                             what="the person's consolidation")
        assert not stack.r.exists("pnc:consolidate:telegram:42", "pnc:consolidate:slack:D0999")
    finally:
        await stack.close()


def test_links_and_sharing_survive_a_redis_restart(valkey: Valkey) -> None:
    import redis

    from gateway.config import parse_config
    from gateway.intake import IdentityStore
    from gateway.queue import Keys
    from gateway.queue.identity import Identities

    settings = parse_config({}, env={})
    with redis.Redis.from_url(valkey.url) as client:
        store = IdentityStore(settings, client, Keys())
        code = store.issue_code(dm("telegram", "42", "42", "a", "/link"))
        linked = store.redeem(code, dm("slack", "D1", "U1", "b", f"/link {code}"))
        assert linked.ok and linked.person is not None
        store.set_share_profile(linked.person, True)
    valkey.stop()
    valkey.start()  # same port, from its append-only file
    with redis.Redis.from_url(valkey.url) as client:
        store = IdentityStore(settings, client, Keys())
        assert store.person_of("telegram:42") == linked.person
        assert store.person_of("slack:U1") == linked.person
        # the flag as a worker reads it (gateway.queue.identity)
        assert Identities(settings.person_of, client, Keys()).shares_profile(linked.person)
        # the spent code stays spent
        assert not store.redeem(code, dm("discord", "9", "9", "c", "x")).ok


def test_a_code_is_shown_with_whose_it_is_before_it_links(valkey: Valkey) -> None:
    """Someone talked into sending a stranger's code must see whose account it joins
    theirs with, and link only by confirming: the preview spends nothing."""
    import redis

    from gateway.config import parse_config
    from gateway.intake import IdentityStore
    from gateway.queue import Keys

    with redis.Redis.from_url(valkey.url) as client:
        store = IdentityStore(parse_config({}, env={}), client, Keys())
        code = store.issue_code(dm("telegram", "42", "42", "a", "/link"))
        victim = dm("slack", "D1", "U1", "b", f"/link {code}")
        shown = store.preview(code, victim)
        assert "telegram:42 (Ada)" in shown and "slack:U1" in shown
        assert f"/link {code} confirm" in shown
        assert store.person_of("slack:U1") is None
        assert "made for this account" in store.preview(
            code, dm("telegram", "42", "42", "c", ""))
        assert "not valid" in store.preview("ZZZZZZZZ", victim)
        assert store.redeem(code, victim).ok  # still live after the previews
        assert "not valid" in store.preview(code, victim)


async def test_link_off_undoes_chat_links_from_either_side(tmp_path: Path,
                                                          valkey: Valkey) -> None:
    """``/link off`` previews, then with ``confirm`` undoes every /link link of the
    person: each DM reads its own memory again, the joint memory is read by no DM; the
    config's links are the operator's and stay."""
    stack = Stack(tmp_path, valkey, LINKED)
    try:
        stack.start_workers(1)
        await stack.start_gateway()
        asked = await stack.ask("ada", "ada", "/link", message_id="u1")
        assert asked.reply is not None
        match = CODE.search(asked.reply)
        assert match, asked.reply
        await command(stack, dm("discord", "D5", "55", "u2", f"/link {match.group(1)} confirm"))
        person = stack.r.hget("pnc:identity:links", "local:ada")
        assert person and stack.r.hget("pnc:identity:links", "discord:55") == person
        stack.r.hset("pnc:identity:share", person, "profile")
        await turn(stack, dm("discord", "D5", "55", "t1", FACT))
        # the preview changes nothing
        preview = await stack.ask("ada", "ada", "/link off", message_id="u3")
        assert preview.reply is not None and "/link off confirm" in preview.reply
        assert stack.r.hlen("pnc:identity:links") == 2
        # from the other side than the one that redeemed the code
        done = await stack.ask("ada", "ada", "/link off confirm", message_id="u4")
        assert done.reply is not None and done.reply.startswith("Unlinked"), done.reply
        assert stack.r.hlen("pnc:identity:links") == 0
        assert not stack.r.hexists("pnc:identity:share", person)
        # each DM now reads its own memory: the fact told while linked is in neither
        again = await turn(stack, dm("discord", "D5", "55", "t2", QUESTION))
        assert "SEAGULL7" not in again["prompt"]
        await stack.ask("ada", "ada", QUESTION, message_id="q2")
        await stack.settled("local:ada")
        [prompt] = [t["prompt"] for t in stack.turns() if "q2" in t["ids"]]
        assert "SEAGULL7" not in prompt
        # nothing left to undo; a config link is the operator's
        nothing = await stack.ask("ada", "ada", "/link off confirm", message_id="u5")
        assert nothing.reply is not None and "not linked" in nothing.reply
        gw = stack.gateway
        assert gw is not None and gw.inbox is not None
        store = gw.inbox.front.identities
        assert store is not None
        told = store.unlink(dm("telegram", "42", "42", "u6", "/link off confirm"))
        assert not told.ok and "[identities.ada]" in told.text
        assert store.person_of("telegram:42") == "ada"
    finally:
        await stack.close()
