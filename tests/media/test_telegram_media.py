"""Telegram files end to end: fake Bot API (getFile + file download) -> real
python-telegram-bot -> gateway (hold, media job, store) -> a real worker whose scripted
model takes images -> replies back on the fake."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest
import redis

from channels.models import Inbound
from tests.channels.kit import eventually
from tests.media.files import exe, pdf, png, png_bomb
from tests.media.stack import ALICE, FILE_CAP, STRANGER, dm, media_stack

GROUP_CHAT = -1005550001


async def test_files_reach_the_turn_and_refusals_get_one_reply(tmp_path: Path) -> None:
    image, doc, tool, bomb = png(), pdf(), exe(), png_bomb()
    big = pdf() + b"%" * (FILE_CAP + 10)
    async with media_stack(tmp_path) as stack:
        fake = stack.fake
        fake.files.update({"ph1": image, "doc1": doc, "exe1": tool, "big1": big,
                           "spy1": image, "bomb1": bomb, "gexe": tool})
        await stack.start_in_loop()
        await fake.enqueue(dm(601, ALICE, caption="what is in this picture?",
                              photo=("ph1", image)))
        await fake.enqueue(dm(602, ALICE, document=("doc1", "report.pdf", doc)))
        await fake.enqueue(dm(603, ALICE, caption="and this tool?",
                              document=("exe1", "tool.pdf", tool)))  # named .pdf: bytes win
        # no size in the update: getFile states it, and nothing is downloaded
        await fake.enqueue(dm(604, ALICE, caption="and this big one?",
                              document=("big1", "big.pdf", big), state_size=False))
        await fake.enqueue(dm(605, STRANGER, caption="hi", photo=("spy1", image)))
        await fake.enqueue(dm(606, ALICE, caption="and this one?", photo=("bomb1", bomb)))
        chatter = dm(607, ALICE, caption="passing by", document=("gexe", "g.pdf", tool))
        chatter["message"]["chat"] = {"id": GROUP_CHAT, "title": "T", "type": "supergroup"}
        await fake.enqueue(chatter)  # a group message not addressed to the bot
        # a file Telegram no longer has: noted for the model, the sender is not told
        await fake.enqueue(dm(608, ALICE, caption="still there?", photo=("gone1", image)))
        await stack.answered(601, 602, 603, 604, 606, 608)

        # the image reached the model as an image, the document as a stored file
        turns = stack.turns()
        image_sha = hashlib.sha256(image).hexdigest()
        doc_sha = hashlib.sha256(doc).hexdigest()
        shown = [i for t in turns for i in t["images"]]
        assert shown == [{"media_type": "image/png", "sha256": image_sha}]
        prompt = "\n".join(t["prompt"] for t in turns)
        assert f"file {image_sha}.png" in prompt and f"file {doc_sha}.pdf" in prompt
        assert "'report.pdf'" in prompt  # the name, as data
        assert "not kept: it is a file type I don't accept" in prompt
        assert f"not kept: it is over the {FILE_CAP / 1e6:g} MB limit" in prompt
        assert "not kept: it is an image too large to open" in prompt  # the PNG bomb
        assert stack.attachments() == sorted([f"{image_sha}.png", f"{image_sha}.json",
                                              f"{doc_sha}.pdf", f"{doc_sha}.json"])

        # one short reply per refused file, besides the model's answer
        async def told() -> bool:
            return all(stack.replies_to(m) for m in (603, 604, 606))

        await eventually(told, timeout=30)
        assert any("tool.pdf" in t and "file type I don't accept" in t
                   for t in stack.replies_to(603))
        assert any("big.pdf" in t and "limit" in t for t in stack.replies_to(604))
        assert any("image too large to open" in t for t in stack.replies_to(606))
        assert fake.downloads.count("documents/big1") == 0  # refused at getFile
        assert sum("couldn't take" in t for t in stack.replies_to(603)) == 1

        # the group's passing chatter: its file refused quietly (no reply to it)
        with redis.Redis.from_url(stack.url) as r:
            async def drained() -> bool:
                return not r.exists(f"pnc:mediahold:telegram:{GROUP_CHAT}")

            await eventually(drained, timeout=30)
        assert any(p.get("file_id") == "gexe" for m, p in fake.calls if m == "getFile")
        assert stack.replies_to(607) == []
        assert "not kept: I could not download it" in prompt
        async def acked_608() -> bool:  # the turn's reply comes after any refusal of 608
            return any("608" in s["text"] and "ack" in s["text"] for s in fake.sent)

        await eventually(acked_608, timeout=30)
        assert not any("couldn't take" in t for t in stack.replies_to(608))
        # the stranger got a pairing code; their file was never asked for
        assert not any(p.get("file_id") == "spy1" for m, p in fake.calls if m == "getFile")
        assert not any(d.endswith("spy1") for d in fake.downloads)
        assert stack.attachments(STRANGER) == []


@pytest.mark.slow  # two gateway processes start: 13-25 s on a loaded machine
async def test_gateway_killed_between_ack_and_download(tmp_path: Path) -> None:
    image = png(color=(10, 200, 10))
    sha = hashlib.sha256(image).hexdigest()
    async with media_stack(tmp_path) as stack:
        fake = stack.fake
        fake.files["ph9"] = image
        fake.hold_downloads = True  # the download hangs: the message is acked already
        stack.start_process()
        await fake.enqueue(dm(609, ALICE, caption="keep this", photo=("ph9", image)))
        await asyncio.wait_for(fake.download_started.wait(), timeout=60)
        with redis.Redis.from_url(stack.url) as r:  # durable: held with its file ref
            held = [json.loads(e) for e in r.lrange(f"pnc:mediahold:telegram:{ALICE}", 0, -1)]
        assert [h["msg"]["message_id"] for h in held] == ["609"]
        stack.kill_process()
        fake.hold_downloads = False
        assert stack.turns() == [] and stack.attachments() == []

        stack.start_process()
        await stack.answered(609)

        async def replied() -> bool:
            return bool(stack.replies_to(609))

        await eventually(replied, timeout=30)
        assert stack.attachments() == [f"{sha}.json", f"{sha}.png"]
        side = json.loads((stack.data / "groups" / "telegram" / str(ALICE) / "attachments"
                           / f"{sha}.json").read_text())
        assert [m["message_id"] for m in side["messages"]] == ["609"]
        turns = stack.turns()
        assert [t["ids"] for t in turns] == [["609"]]  # one turn, after the download
        assert turns[0]["images"] == [{"media_type": "image/png", "sha256": sha}]
        assert len(stack.replies_to(609)) == 1


async def test_a_message_deleted_while_its_file_downloads_never_reaches_a_turn(
        tmp_path: Path) -> None:
    image = png(color=(1, 2, 3))
    async with media_stack(tmp_path) as stack:
        fake = stack.fake
        fake.files["ph7"] = image
        fake.hold_downloads = True
        await stack.start_in_loop()
        assert stack.gateway is not None and stack.gateway.inbox is not None
        await fake.enqueue(dm(701, ALICE, caption="oops, wrong chat", photo=("ph7", image)))
        await asyncio.wait_for(fake.download_started.wait(), timeout=30)
        await fake.enqueue(dm(702, ALICE, caption="hello again", photo=None))
        deletion = Inbound(channel="telegram", chat_id=str(ALICE), is_group=False,
                           sender_id=str(ALICE), sender_name="user", message_id="701:del",
                           text="", kind="deletion", original_id="701")
        assert await stack.gateway.inbox.accept(deletion) == "recorded"
        fake.hold_downloads = False
        await stack.answered(702)
        assert all("701" not in t["ids"] for t in stack.turns())
        assert stack.attachments() == []
