"""A person's memory (``persons/<id>/``) is written by the turns of each of their DMs,
and message ids are each platform's, unique only within one chat: two DMs can both have
a message "12". A deletion or an edit from one DM (``chat``) changes that DM's line,
facts, quotes and core entries only, never those of the other DM's message "12"."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from memory_helpers import BACKENDS, backend_options

from channels.models import Inbound
from memory_store import BaseMemory, open_memory, person_key
from memory_store.files import add_agent_entry, agent_entries
from memory_store.maintenance import (
    EDITED_SUFFIX,
    REDACTED_MARKER,
    edit_message,
    message_lines,
    redact_message,
    replies_holding,
    words_matcher,
)
from workers.turn import Batch, episode_text

TG, SL = "telegram:42", "slack:D1"  # the person's two DMs
SECRET = "my door code is 4417 Zanzibar"
BOAT = "I bought a sailboat named Seagullian"


@pytest.fixture(params=BACKENDS)
def person(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseMemory]:
    m = open_memory(tmp_path / "data", person_key("ada"), str(request.param),
                    **backend_options(str(request.param)))
    yield m
    m.close()


def _msg(chat: str, mid: str, text: str) -> Inbound:
    channel, _, chat_id = chat.partition(":")
    return Inbound(channel=channel, chat_id=chat_id, is_group=False, sender_id=chat_id,
                   sender_name="Ada", message_id=mid, text=text,
                   received_at=datetime(2026, 12, 1, 10, 0, tzinfo=UTC))


def _episode(mem: BaseMemory, chat: str, msgs: list[Inbound], reply: str, eid: str,
             quotes: dict[str, str] | None = None) -> None:
    """As ``workers.turn`` writes it: the source names the DM the messages came from."""
    ids = [m.message_id for m in msgs]
    mem.write_sync(episode_text(Batch(chat, msgs, ids, []), reply), kind="episode",
                   metadata={"id": eid, "source": f"{chat}:msg/" + ",".join(ids),
                             "message_ids": ids, "trust": 0.9, **({"quotes": quotes}
                                                                  if quotes else {})})


def _fact(mem: BaseMemory, chat: str, fid: str, text: str, ids: list[str]) -> None:
    mem.write_sync(text, kind="fact", metadata={
        "id": fid, "message_ids": ids, "source": f"{chat}:msg/" + ",".join(ids),
        "trust": 0.9})


def _both_twelves(mem: BaseMemory) -> None:
    """Message "12" in each DM, with what was drawn from each."""
    _episode(mem, TG, [_msg(TG, "12", SECRET)], "Noted.", "turn-tg")
    _episode(mem, TG, [_msg(TG, "13", "see you at noon")], "Fine.", "turn-tg2")
    _episode(mem, SL, [_msg(SL, "12", BOAT)], "Nice boat.", "turn-sl")
    # a later Slack message replying to Slack's "12", showing its text
    _episode(mem, SL, [_msg(SL, "13", "what a lovely name, right?")], "Yes.", "turn-sl2",
             quotes={"13": "12"})
    _fact(mem, TG, "fact-tg", "Ada's door code is 4417", ["12"])
    _fact(mem, SL, "fact-sl", "Ada owns a sailboat", ["12"])
    _fact(mem, SL, "fact-sl13", "Ada likes the name", ["13"])
    _fact(mem, TG, "fact-tg13", "Ada meets at noon", ["13"])
    day = date(2026, 12, 1)
    add_agent_entry(mem.group, "CLAUDE.md", "Greet Ada in Portuguese", source=f"{TG}:msg/12",
              trust=0.9, actor="test", today=day)
    add_agent_entry(mem.group, "CLAUDE.md", "Call Ada skipper", source=f"{SL}:msg/12",
              trust=0.9, actor="test", today=day)
    mem.flush()


def _live(mem: BaseMemory) -> dict[str, str]:
    return {r.id: r.content for r in mem.records({"kind": "fact"})}


def _episodes(mem: BaseMemory) -> str:
    return "".join(r.content for r in mem.records({"kind": "episode",
                                                   "include_superseded": True}))


def test_a_deletion_from_one_dm_leaves_the_other_dms_same_id_alone(
        person: BaseMemory) -> None:
    _both_twelves(person)
    assert message_lines(person, "12", chat=TG) == [SECRET]
    assert message_lines(person, "12", chat=SL) == [BOAT]

    out = redact_message(person, "12", chat=TG, request="deletion:d1")
    assert out.changed and out.removed == [SECRET]
    text = _episodes(person)
    assert "Zanzibar" not in text and f"(42): {REDACTED_MARKER}" in text
    assert BOAT in text  # Slack's "12" keeps its line
    # the Telegram fact is retired; Slack's, the one drawn from Slack's "13" (which
    # quoted Slack's "12") and the one from Telegram's own "13" stay
    assert _live(person) == {"fact-sl": "Ada owns a sailboat",
                             "fact-sl13": "Ada likes the name",
                             "fact-tg13": "Ada meets at noon"}
    assert agent_entries(person.group, "CLAUDE.md") == ["Call Ada skipper"]
    assert message_lines(person, "12", chat=SL) == [BOAT]
    assert message_lines(person, "12", chat=TG) == []


def test_an_edit_from_one_dm_is_its_authors_there_and_changes_only_its_line(
        person: BaseMemory) -> None:
    """The other DM's "12" has another sender: it must not make the edit look forged."""
    _both_twelves(person)
    out = edit_message(person, "12", "I bought a dinghy named Seagullian", sender_id="D1",
                       chat=SL, request="edit:e1")
    assert not out.refused and out.changed
    text = _episodes(person)
    assert f"(D1): I bought a dinghy named Seagullian{EDITED_SUFFIX}" in text
    assert SECRET in text  # Telegram's "12" is untouched
    assert _live(person)["fact-tg"] == "Ada's door code is 4417"
    assert "fact-sl" not in _live(person)  # drawn from the old words: retired
    # Telegram's sender cannot edit Slack's "12" (another author there)
    assert not edit_message(person, "12", "x", sender_id="42", chat=SL,
                            request="edit:e2").changed
    assert SECRET in _episodes(person)


def test_replies_holding_the_words_are_looked_up_in_the_dm_only(
        person: BaseMemory) -> None:
    """The queue knows the bot replies' platform ids per turn: only the DM's own turns
    may lend theirs to the deletion (a reply's id in another DM means another reply)."""
    _episode(person, TG, [_msg(TG, "12", SECRET)], "Noted: Zanzibar.", "turn-tg")
    _episode(person, SL, [_msg(SL, "30", "and the code?")], "It was Zanzibar.", "turn-sl")
    pat = words_matcher([SECRET])
    assert pat is not None
    assert replies_holding(person, pat, chat=TG) == ["turn-tg"]
    assert sorted(replies_holding(person, pat)) == ["turn-sl", "turn-tg"]
