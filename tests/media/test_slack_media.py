"""Slack files end to end: fake Slack (Socket Mode, ``url_private`` served with the bot
token) -> real Bolt/slack_sdk -> gateway (hold, media job, store) -> a real worker whose
scripted model takes images -> chat.postMessage on the fake."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from gateway.app import Gateway
from gateway.config import load_config
from tests.channels.e2e import valkey, worker
from tests.channels.kit import eventually
from tests.fakes.slack_api import FakeSlack, channel_env, message_event
from tests.media.files import exe, png
from tests.media.stack import answered, config, turns

DM, STRANGER_DM = "D0ALICE001", "D0STRANGE1"


def _file(fake: FakeSlack, fid: str, name: str, mime: str, data: bytes) -> dict[str, Any]:
    return {"id": fid, "name": name, "mimetype": mime, "size": len(data),
            "url_private": fake.file_url(fid, name)}


async def test_slack_image_and_refused_file_and_a_stranger(tmp_path: Path) -> None:
    image, tool = png(), exe()
    fake = FakeSlack()
    await fake.start()
    fake.files.files.update({"T0TEAM001-F0PIC00001": image, "T0TEAM001-F0EXE00001": tool,
                             "T0TEAM001-F0SPY00001": image})
    tables = (f'\n[channels.slack]\nmode = "socket"\napi_base_url = "{fake.base_url}"\n'
              "ping_interval = 1.0\n")
    try:
        with valkey(tmp_path) as url:
            path = config(tmp_path / "pynanoclaw.toml", url, tables, allow="slack:U0ALICE01")
            with worker(path, url, {"PNC_TEST_REDIS_URL": url}):
                gw = Gateway(load_config(path), url, env=channel_env(), consumer="sl-media")
                await gw.start()
                try:
                    await fake.wait_connected()
                    await fake.push_event(message_event(
                        "what is this?", channel=DM, channel_type="im",
                        ts="1700000201.000100", subtype="file_share",
                        files=[_file(fake, "F0PIC00001", "cat.png", "image/png", image),
                               _file(fake, "F0EXE00001", "notes.txt", "text/plain", tool)]))
                    await fake.push_event(message_event(
                        "hi", channel=STRANGER_DM, channel_type="im", user="U0STRANGE1",
                        ts="1700000202.000100", subtype="file_share",
                        files=[_file(fake, "F0SPY00001", "x.png", "image/png", image)]))
                    await answered(url, "1700000201.000100")
                    seen = turns(url)
                    sha = hashlib.sha256(image).hexdigest()
                    assert [i for t in seen for i in t["images"]] == \
                        [{"media_type": "image/png", "sha256": sha}]
                    prompt = "\n".join(t["prompt"] for t in seen)
                    assert "'notes.txt'" in prompt
                    assert "not kept: it is a file type I don't accept" in prompt

                    def told() -> list[str]:
                        return [p["text"] for p in fake.posted
                                if "couldn't take" in str(p.get("text"))]

                    async def replied() -> bool:
                        return bool(told())

                    await eventually(replied, timeout=30)
                    assert len(told()) == 1 and "notes.txt" in told()[0]
                    assert "T0TEAM001-F0SPY00001" not in fake.files.downloads
                    assert sorted(fake.files.downloads) == ["T0TEAM001-F0EXE00001",
                                                            "T0TEAM001-F0PIC00001"]
                finally:
                    await gw.stop()
    finally:
        await fake.stop()
