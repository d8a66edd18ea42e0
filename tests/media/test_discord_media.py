"""Discord files end to end: fake Discord (gateway websocket, REST, a CDN serving the
attachments) -> real discord.py -> gateway (hold, media job, store) -> a real worker
whose scripted model takes images -> the reply on the fake."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

from gateway.app import Gateway
from gateway.config import load_config
from tests.channels.e2e import valkey, worker
from tests.channels.harness_discord import TOKEN, DiscordRig, wait_until
from tests.fakes.discord_api import snowflake, user_json
from tests.media.files import exe, png
from tests.media.stack import answered, config, turns


async def test_discord_image_and_refused_file_and_a_stranger(tmp_path: Path) -> None:
    image, tool = png(), exe()
    async with DiscordRig(start=False) as rig:
        fake = rig.fake

        def att(channel: dict[str, Any], name: str, mime: str, data: bytes) -> dict[str, Any]:
            aid = snowflake()
            fake.cdn.files[aid] = data
            url = fake.cdn_url(channel["id"], aid, name)
            return {"id": aid, "filename": name, "size": len(data), "url": url,
                    "proxy_url": url, "content_type": mime}

        stranger = user_json(snowflake(), "mallory")
        stranger_dm = fake.add_dm(stranger)
        tables = f'\n[channels.discord]\napi_base_url = "{fake.base_url}"\n'
        with valkey(tmp_path) as url:
            path = config(tmp_path / "pynanoclaw.toml", url, tables,
                          allow=f"discord:{rig.alice['id']}")
            with worker(path, url, {"PNC_TEST_REDIS_URL": url}):
                gw = Gateway(load_config(path), url, env={"DISCORD_BOT_TOKEN": TOKEN},
                             consumer="dc-media")
                await gw.start()
                try:
                    await asyncio.wait_for(fake.connected.wait(), timeout=30)
                    pic = att(rig.dm, "cat.png", "image/png", image)
                    bad = att(rig.dm, "notes.pdf", "application/pdf", tool)
                    said = await rig.say(rig.dm, "what is this?", attachments=[pic, bad])
                    spy = att(stranger_dm, "x.png", "image/png", image)
                    await rig.say(stranger_dm, "hi", attachments=[spy], author=stranger)
                    await answered(url, said["id"])
                    seen = turns(url)
                    sha = hashlib.sha256(image).hexdigest()
                    assert [i for t in seen for i in t["images"]] == \
                        [{"media_type": "image/png", "sha256": sha}]
                    assert "not kept: it is a file type I don't accept" in \
                        "\n".join(t["prompt"] for t in seen)

                    def told() -> list[str]:
                        return [s["content"] for s in fake.sent
                                if "couldn't take" in str(s.get("content"))]

                    await wait_until(lambda: bool(told()), timeout=30)
                    assert len(told()) == 1 and "notes.pdf" in told()[0]
                    assert spy["id"] not in fake.cdn.downloads
                    assert sorted(fake.cdn.downloads) == sorted([pic["id"], bad["id"]])
                finally:
                    await gw.stop()
