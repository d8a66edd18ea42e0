"""WhatsApp files end to end: fake Cloud API (media id -> URL -> bytes with the token)
-> signed webhook -> gateway (hold, media job, store) -> a real worker whose scripted
model takes images -> replies through pywa to the fake."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

from gateway.app import Gateway
from gateway.config import load_config
from tests.channels.e2e import free_port, valkey, worker
from tests.channels.harness_whatsapp import ALICE, channel_env
from tests.channels.kit import eventually, load_fixture
from tests.fakes.whatsapp_api import API_VERSION, PHONE_NUMBER_ID, FakeWhatsApp
from tests.media.files import exe, png
from tests.media.stack import answered, config, turns

IMAGE_ID, DOC_ID, SPY_ID = "1003383421387256", "889412339912345", "5550001112223"


def _message(payload: dict[str, Any]) -> dict[str, Any]:
    msg: dict[str, Any] = payload["entry"][0]["changes"][0]["value"]["messages"][0]
    return msg


def _stranger_image() -> dict[str, Any]:
    """``image_caption`` sent by a number nobody approved, with a media id of its own."""
    payload = copy.deepcopy(load_fixture("whatsapp", "image_caption"))
    value = payload["entry"][0]["changes"][0]["value"]
    value["contacts"][0]["wa_id"] = "16505550000"
    msg = _message(payload)
    msg.update({"from": "16505550000", "id": "wamid.STRANGER0001"})
    msg["image"]["id"] = SPY_ID
    return payload


async def test_whatsapp_image_and_refused_document_and_a_stranger(tmp_path: Path) -> None:
    image, tool = png(), exe()
    fake = FakeWhatsApp()
    await fake.start()
    port = free_port()
    fake.webhook_url = f"http://127.0.0.1:{port}/whatsapp/webhook"
    fake.media.files.update({IMAGE_ID: image, DOC_ID: tool, SPY_ID: image})
    tables = f"""
[http]
port = {port}
[channels.whatsapp]
phone_number_id = "{PHONE_NUMBER_ID}"
api_base_url = "{fake.base_url}"
api_version = "{API_VERSION}"
"""
    try:
        with valkey(tmp_path) as url:
            path = config(tmp_path / "pynanoclaw.toml", url, tables, allow=f"whatsapp:{ALICE}")
            with worker(path, url, {"PNC_TEST_REDIS_URL": url}):
                gw = Gateway(load_config(path), url, env=channel_env(), consumer="wa-media")
                await gw.start()
                try:
                    image_msg = load_fixture("whatsapp", "image_caption")
                    doc_msg = load_fixture("whatsapp", "document")  # budget-2026.pdf: an exe
                    for payload in (image_msg, doc_msg, _stranger_image()):
                        assert await fake.deliver(payload) == 200
                    image_wamid, doc_wamid = _message(image_msg)["id"], _message(doc_msg)["id"]
                    await answered(url, image_wamid, doc_wamid)

                    seen = turns(url)
                    sha = hashlib.sha256(image).hexdigest()
                    assert [i for t in seen for i in t["images"]] == \
                        [{"media_type": "image/png", "sha256": sha}]
                    prompt = "\n".join(t["prompt"] for t in seen)
                    assert "'budget-2026.pdf'" in prompt
                    assert "not kept: it is a file type I don't accept" in prompt

                    def told() -> list[str]:
                        return [s["text"]["body"] for s in fake.sent
                                if s.get("context", {}).get("message_id") == doc_wamid
                                and "couldn't take" in s.get("text", {}).get("body", "")]

                    async def replied() -> bool:
                        return bool(told())

                    await eventually(replied, timeout=30)
                    assert len(told()) == 1 and "budget-2026.pdf" in told()[0]
                    # the stranger's media was never asked for, nor its URL
                    assert SPY_ID not in fake.media.downloads
                    assert not any(p.endswith(f"/{SPY_ID}") for _, p in fake.calls)
                    folder = tmp_path / "data" / "groups" / "whatsapp" / ALICE / "attachments"
                    assert sorted(p.name for p in folder.iterdir() if p.name[0] != ".") == \
                        [f"{sha}.json", f"{sha}.png"]
                finally:
                    await gw.stop()
    finally:
        await fake.stop()
