"""A deletion and a ``/forget`` in a DM linked to a person reach the person's own
directory (``persons/<id>/``), where that DM's turns wrote: real Valkey, a real worker
process, the local channel."""

from __future__ import annotations

from pathlib import Path

from gateway.queue import Keys
from tests.pipeline.conftest import Stack, Valkey
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
