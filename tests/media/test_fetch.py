"""``gateway.media.fetch.fetch_one`` with the real Telegram adapter against its fake:
transient failures retried (a 429's wait honoured), the caps and the type allowlist of
``[media]``, the per-group total; and retention deleting old files."""

from __future__ import annotations

import hashlib
from pathlib import Path

from channels.local import LocalChannel
from channels.models import Attachment
from gateway.config.media import MediaConfig
from gateway.intake import GroupFiles
from gateway.media.fetch import fetch_one
from gateway.media.store import Received
from memory_store.files import attachments as files
from tests.channels.harness_telegram import telegram_harness
from tests.fakes.telegram_api import failure_for
from tests.media.files import pdf, png

GROUP = "telegram:42"


def _came(mid: str) -> Received:
    return Received("telegram", mid, "f", 1.0)


async def test_transient_failures_are_retried_then_stored(tmp_path: Path) -> None:
    gf, data = GroupFiles(tmp_path), png()
    async with telegram_harness() as h:
        h.fake.files["ph"] = data
        h.fake.fail_next("getFile", failure_for(500))
        h.fake.fail_next("getFile", failure_for(429, retry_after=1))
        got = await fetch_one(MediaConfig(attempts=3), gf, GROUP, h.channel,
                              Attachment(id="ph", type="image"), _came("1"))
        assert got.stored == f"{hashlib.sha256(data).hexdigest()}.png"
        assert got.mime == "image/png" and got.refused is None
        assert [m for m, _ in h.fake.calls if m == "getFile"] == ["getFile"] * 3
        # out of tries: not kept, said so
        for _ in range(2):
            h.fake.fail_next("getFile", failure_for(500))
        gone = await fetch_one(MediaConfig(attempts=2), gf, GROUP, h.channel,
                               Attachment(id="ph", type="image"), _came("2"))
        assert gone.stored is None and gone.refused == "I could not download it"


async def test_caps_and_types(tmp_path: Path) -> None:
    gf, image, doc = GroupFiles(tmp_path), png(), pdf()
    async with telegram_harness() as h:
        h.fake.files.update({"ph": image, "doc": doc})
        only_images = MediaConfig(allowed_types=["image/png"])
        refused = await fetch_one(only_images, gf, GROUP, h.channel,
                                  Attachment(id="doc", type="document"), _came("1"))
        assert refused.refused == "it is a file type I don't accept"
        small = MediaConfig(max_file_bytes=len(image) - 1)
        big = await fetch_one(small, gf, GROUP, h.channel,
                              Attachment(id="ph", type="image"), _came("2"))
        assert big.refused is not None and "limit" in big.refused
        assert h.fake.downloads == ["documents/doc"]  # getFile said the size: not fetched
        group_cap = MediaConfig(max_group_bytes=len(image) + len(doc) - 1)
        first = await fetch_one(group_cap, gf, GROUP, h.channel,
                                Attachment(id="ph", type="image"), _came("3"))
        second = await fetch_one(group_cap, gf, GROUP, h.channel,
                                 Attachment(id="doc", type="document"), _came("4"))
        assert first.stored is not None
        assert second.refused is not None and "chat's files" in second.refused
        full = MediaConfig(max_group_bytes=len(image))  # the image fills the chat's room
        again = await fetch_one(full, gf, GROUP, h.channel,  # the same bytes: no new room
                                Attachment(id="ph", type="image"), _came("5"))
        assert again.stored == first.stored


async def test_an_adapter_without_downloads_leaves_metadata_and_tells_nobody(
        tmp_path: Path) -> None:
    channel = LocalChannel("redis://127.0.0.1:9")  # the local console has no files
    att = Attachment(id="x", type="image", name="cat.png")
    try:
        got = await fetch_one(MediaConfig(), GroupFiles(tmp_path), "local:ann", channel, att,
                              _came("1"))
    finally:
        await channel.stop()
    assert got == att  # neither stored nor refused: no "couldn't take" reply


def test_retention_deletes_files_last_received_long_ago(tmp_path: Path) -> None:
    from gateway.media import put, sniff

    gf, old, new = GroupFiles(tmp_path), png(), pdf()
    put(gf, GROUP, old, sniff(old), Received("telegram", "1", "a", 1_000.0))
    kept = put(gf, GROUP, new, sniff(new), Received("telegram", "2", "b", 90 * 86400.0))
    removed = files.expire(gf.attachments(GROUP), days=30, now=100 * 86400.0)
    assert removed == [f"{hashlib.sha256(old).hexdigest()}.png"]
    left = sorted(p.name for p in gf.attachments(GROUP).iterdir() if p.name[0] != ".")
    assert left == sorted([kept.stored, f"{kept.sha256}.json"])
