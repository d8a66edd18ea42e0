"""A deletion and a ``/forget`` in a DM linked to a person reach the person's own
directory (``persons/<id>/``), where that DM's turns wrote: real Valkey, a real worker
process, the local channel."""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

from gateway.queue import Keys
from memory_store import open_memory
from memory_store.maintenance import EDITED_SUFFIX, REDACTED_MARKER
from tests.pipeline.conftest import Stack, Valkey
from tests.pipeline.test_edit_memory import edit
from tests.pipeline.test_identity import CODE
from tests.pipeline.test_redaction import deletion, files_holding, redactions

K = Keys()
LINKED = '\n[identities.ada]\nmembers = ["local:ann", "local:ann2"]\n'


async def test_a_deletion_and_a_forget_in_a_linked_dm_reach_the_persons_memory(
        tmp_path: Path, valkey: Valkey) -> None:
    stack = Stack(tmp_path, valkey, LINKED)
    try:
        gw = await stack.start_gateway()
        assert gw.inbox is not None
        stack.start_workers(1)
        group = "local:ann"
        said = await stack.ask("ann", "ann", "my door code is 4417 Zanzibar", message_id="m1")
        assert said.reply == "ack m1"
        told = await stack.ask("ann", "ann", "the boat is called Seagullian", message_id="m2")
        assert told.reply == "ack m2"
        await stack.settled(group)
        person = stack.data_dir / "persons" / "ada"
        assert files_holding(person, "Zanzibar") and files_holding(person, "Seagullian")

        assert await gw.inbox.accept(deletion("ann", "m1")) == "recorded"
        await stack.wait_for(lambda: not stack.r.exists(K.changes(group)) and
                             bool(redactions(person)), what="the deletion's redaction")
        assert files_holding(person, "Zanzibar") == []

        done = await stack.ask("ann", "ann", "/forget Seagullian confirm", message_id="f1")
        assert done.reply is not None and done.reply.startswith("Forgetting")
        await stack.wait_for(lambda: not stack.r.exists(K.forget(group)) and
                             len(redactions(person)) == 2, what="the forget's redaction")
        assert files_holding(person, "Seagullian") == []
    finally:
        await stack.close()


BOAT = "I bought a sailboat named Seagullian"
DINGHY = "I bought a dinghy named Seagullian"


async def test_a_change_in_one_linked_dm_spares_the_other_dms_message_of_the_same_id(
        tmp_path: Path, valkey: Valkey) -> None:
    """Message ids are each chat's own: both DMs have a message "m1" in the person's
    memory. An edit in one (its author's, though the other "m1" has another sender) and a
    deletion in the other each change their own DM's line and what was drawn from it."""
    stack = Stack(tmp_path, valkey, LINKED)
    try:
        gw = await stack.start_gateway()
        assert gw.inbox is not None
        stack.start_workers(1)
        for chat, text in (("ann", "my door code is 4417 Zanzibar"), ("ann2", BOAT)):
            assert (await stack.ask(chat, chat, text, message_id="m1")).reply == "ack m1"
            await stack.settled(f"local:{chat}")
        person = stack.data_dir / "persons" / "ada"
        with closing(open_memory(stack.data_dir, "person:ada", backend="file",
                                 watch="poll")) as mem:
            for chat, fact in (("ann", "Ada's door code is 4417"),
                               ("ann2", "Ada owns a sailboat")):  # as extraction would
                mem.write_sync(fact, kind="fact", metadata={
                    "id": f"fact-{chat}", "message_ids": ["m1"],
                    "source": f"local:{chat}:msg/m1", "trust": 0.9})

        assert await gw.inbox.accept(deletion("ann", "m1")) == "recorded"
        await stack.wait_for(lambda: not stack.r.exists(K.changes("local:ann")),
                             what="the deletion")
        assert files_holding(person, "Zanzibar") == []
        assert f"(ann2): {BOAT}" in episodes(person)  # the other "m1"
        assert facts(stack) == {"fact-ann": "source deleted", "fact-ann2": None}

        assert await gw.inbox.accept(edit("ann2", "m1", DINGHY)) == "recorded"
        await stack.wait_for(lambda: not stack.r.exists(K.changes("local:ann2")),
                             what="the edit")
        # applied, though the other "m1" (now redacted) has another sender
        assert files_holding(person, "sailboat") == []
        text = episodes(person)
        assert f"(ann): {REDACTED_MARKER}" in text and f"(ann2): {DINGHY}{EDITED_SUFFIX}" in text
        assert facts(stack) == {"fact-ann": "source deleted", "fact-ann2": "source edited"}
    finally:
        await stack.close()


def episodes(root: Path) -> str:
    return "".join(p.read_text() for p in (root / "episodes").rglob("*.md"))


def facts(stack: Stack) -> dict[str, str | None]:
    """The person's facts: id -> why retired (None: live)."""
    with closing(open_memory(stack.data_dir, "person:ada", backend="file",
                             watch="poll")) as mem:
        return {r.id: r.metadata.get("superseded_reason")
                for r in mem.records({"kind": "fact", "include_superseded": True})}


async def test_after_link_off_a_deletion_still_reaches_what_the_dm_wrote_there(
        tmp_path: Path, valkey: Valkey) -> None:
    """``/link off`` leaves the person's memory as it was, read by no DM, and the DM's
    ``personmem`` set still names it. Kept on purpose: a message deleted on its platform
    must leave every memory it went into, and the words it wrote there stay there after
    the unlink (no DM reads that memory any more, so nobody would notice them). What
    reaches it is that DM's own message only: the other DM's message of the same id
    (perhaps another person's, the link being a mistake) keeps its line."""
    stack = Stack(tmp_path, valkey)
    try:
        gw = await stack.start_gateway()
        assert gw.inbox is not None
        stack.start_workers(1)
        asked = await stack.ask("ann", "ann", "/link", message_id="u1")
        code = CODE.search(asked.reply or "")
        assert code, asked.reply
        await stack.ask("ann2", "ann2", f"/link {code.group(1)} confirm", message_id="u2")
        pid = (stack.r.hget(K.identity_links, "local:ann") or b"").decode()
        assert pid and stack.r.hget(K.identity_links, "local:ann2") == pid.encode()
        for chat, text in (("ann", "my door code is 4417 Zanzibar"), ("ann2", BOAT)):
            assert (await stack.ask(chat, chat, text, message_id="m1")).reply == "ack m1"
            await stack.settled(f"local:{chat}")
        person = stack.data_dir / "persons" / pid
        assert files_holding(person, "Zanzibar") and f"(ann2): {BOAT}" in episodes(person)

        off = await stack.ask("ann", "ann", "/link off confirm", message_id="u3")
        assert (off.reply or "").startswith("Unlinked"), off.reply
        assert not stack.r.hexists(K.identity_links, "local:ann")
        assert stack.r.smembers(K.person_memories("local:ann")) == {f"person:{pid}".encode()}
        assert await gw.inbox.accept(deletion("ann", "m1")) == "recorded"
        await stack.wait_for(lambda: not stack.r.exists(K.changes("local:ann")),
                             what="the deletion")
        assert files_holding(person, "Zanzibar") == []
        assert f"(ann): {REDACTED_MARKER}" in episodes(person)
        assert f"(ann2): {BOAT}" in episodes(person)
    finally:
        await stack.close()
