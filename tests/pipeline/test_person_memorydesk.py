"""``/memory`` and the ``/forget`` preview in a DM linked to a person see the person's
own directory (``persons/<id>/``), where that DM's turns wrote; a group chat never does:
real Valkey, a real worker process, the local channel."""

from __future__ import annotations

from pathlib import Path

from gateway.queue import Keys
from tests.pipeline.conftest import Stack, Valkey
from tests.pipeline.test_redaction import files_holding, redactions

K = Keys()
LINKED = '\n[identities.ada]\nmembers = ["local:ann", "local:ann2"]\n'
PERSONAL = "Personal memory (persons/ada/, shared by your linked DMs):"


async def test_memory_and_forget_in_a_linked_dm_cover_the_persons_memory(
        tmp_path: Path, valkey: Valkey) -> None:
    stack = Stack(tmp_path, valkey, LINKED)
    try:
        await stack.start_gateway()
        stack.start_workers(1)
        said = await stack.ask("ann", "ann", "my door code is 4417 Zanzibar", message_id="m1")
        assert said.reply == "ack m1"
        await stack.settled("local:ann")
        person = stack.data_dir / "persons" / "ada"
        assert files_holding(person, "Zanzibar")

        shown = await stack.ask("ann", "ann", "/memory", message_id="q1")
        assert shown.reply is not None and PERSONAL in shown.reply, shown.reply
        assert "1 episode" in shown.reply.split(PERSONAL)[1], shown.reply
        preview = await stack.ask("ann", "ann", "/forget Zanzibar", message_id="q2")
        assert preview.reply is not None and "appear 1 time in 1 memory of local:ann, 1 " \
            "of them in your personal memory" in preview.reply, preview.reply
        assert "(persons/ada/: episodes/" in preview.reply and \
            "zanzibar" not in preview.reply.lower(), preview.reply

        # the other linked DM has had no turn (no Keys.person_memories entry): the link
        # finds the memory, as after a Redis wipe; a confirmed /forget there reaches it
        assert not stack.r.exists(K.person_memories("local:ann2"))
        other = await stack.ask("ann2", "ann2", "/memory", message_id="q3")
        assert other.reply is not None and PERSONAL in other.reply, other.reply
        done = await stack.ask("ann2", "ann2", "/forget Zanzibar confirm", message_id="q4")
        assert done.reply is not None and done.reply.startswith("Forgetting"), done.reply
        await stack.wait_for(lambda: not stack.r.exists(K.forget("local:ann2")) and
                             bool(redactions(person)), what="the forget's redaction")
        assert files_holding(person, "Zanzibar") == []

        # isolation: the linked person asking in a group sees none of it, even with a
        # (stale or forged) person entry under the group's key
        stack.r.sadd(K.person_memories("local:crew"), "person:ada")
        told = await stack.ask("crew", "ann", "the boat is Seagullian", group=True,
                               mention=True, message_id="g1")
        assert told.reply is not None
        await stack.settled("local:crew")
        crew = await stack.ask("crew", "ann", "/memory", group=True, message_id="g2")
        assert crew.reply is not None and crew.reply.startswith(
            "What I keep about local:crew:"), crew.reply
        assert "persons/" not in crew.reply and "Personal" not in crew.reply, crew.reply
        gone = await stack.ask("crew", "ann", "/forget door code", group=True,
                               message_id="g3")
        assert gone.reply is not None and "personal" not in gone.reply.lower(), gone.reply
    finally:
        await stack.close()
