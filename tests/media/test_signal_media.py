"""Signal files end to end: fake signal-cli (events stream, ``getAttachment`` serving
what the daemon downloaded on receipt) -> SignalChannel -> gateway (hold, media job,
store) -> a real worker whose scripted model takes images -> quoted replies on the fake."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from gateway.app import Gateway
from gateway.config import load_config
from tests.channels.e2e import valkey, worker
from tests.channels.harness_signal import env, new_fake
from tests.channels.kit import eventually
from tests.fakes.signal_cli import BOT_NUMBER, BOT_UUID, FakeSignalCli, data_message
from tests.media.files import exe, pdf, png
from tests.media.stack import FILE_CAP, answered, config, saw_files

ALICE = "a11ce000-0000-4000-8000-000000000002"  # allowed; data_message's default sender
STRANGER = "5712a000-0000-4000-8000-000000000666"  # a DM under pairing, never approved
T0 = 1_700_000_400_000


def _file(fake: FakeSignalCli, attachment_id: str, mime: str, data: bytes,
          name: str | None = None) -> dict[str, Any]:
    """``data`` as the daemon keeps it, listed as signal-cli's ``JsonAttachment``."""
    fake.attachments[attachment_id] = data
    listed: dict[str, Any] = {"contentType": mime, "id": attachment_id, "size": len(data),
                              "uploadTimestamp": T0}
    if name is not None:
        listed["filename"] = name
    return listed


async def test_signal_files_refusals_and_a_stranger(tmp_path: Path) -> None:
    image, doc, tool = png(), pdf(), exe()
    big = pdf() + b"%" * (FILE_CAP + 10)
    fake = new_fake()
    await fake.start()
    tables = f"""
[channels.signal]
url = "{fake.base_url}"
number = "{BOT_NUMBER}"
uuid = "{BOT_UUID}"
receive_mode = "on-connection"
auth_env = "SIGNAL_PROXY_AUTH"
idle_timeout = 5
backoff_initial = 0.05
backoff_max = 0.5
"""
    try:
        with valkey(tmp_path) as url:
            path = config(tmp_path / "pynanoclaw.toml", url, tables, allow=f"signal:{ALICE}")
            with worker(path, url, {"PNC_TEST_REDIS_URL": url}):
                gw = Gateway(load_config(path), url, env=env(), consumer="sg-media")
                await gw.start()
                try:
                    await fake.wait_subscribers(1)
                    sent = [
                        ("what is in this picture?",
                         _file(fake, "p1cTur3.png", "image/png", image)),
                        ("here is the report",
                         _file(fake, "r3p0rt.pdf", "application/pdf", doc, "report.pdf")),
                        ("and this big one?",
                         _file(fake, "b1g.pdf", "application/pdf", big, "big.pdf")),
                        ("and this tool?",  # named .pdf: the bytes decide
                         _file(fake, "t00l.pdf", "application/pdf", tool, "tool.pdf")),
                    ]
                    for i, (text, listed) in enumerate(sent):
                        await fake.receive(data_message(text, timestamp=T0 + i,
                                                        attachments=[listed]))
                    spy = _file(fake, "5py.png", "image/png", image)
                    await fake.receive(data_message("hi", timestamp=T0 + 9, uuid=STRANGER,
                                                    number="+15550006666", name="Mallory",
                                                    attachments=[spy]))
                    ids = [f"{ALICE}:{T0 + i}" for i in range(len(sent))]
                    await answered(url, *ids)

                    prompt = saw_files(url, image, doc)
                    image_sha = hashlib.sha256(image).hexdigest()
                    doc_sha = hashlib.sha256(doc).hexdigest()
                    # the text of each refused file's message was answered all the same
                    for text, _ in sent:
                        assert text in prompt
                    folder = tmp_path / "data" / "groups" / "signal" / ALICE / "attachments"
                    assert sorted(p.name for p in folder.iterdir() if p.name[0] != ".") == \
                        sorted([f"{image_sha}.png", f"{image_sha}.json",
                                f"{doc_sha}.pdf", f"{doc_sha}.json"])

                    def told(stamp: int) -> list[str]:
                        return [s["message"] for s in fake.sent
                                if s.get("quoteTimestamp") == stamp
                                and "couldn't take" in s["message"]]

                    async def refusals() -> bool:
                        return bool(told(T0 + 2)) and bool(told(T0 + 3))

                    await eventually(refusals, timeout=30)
                    [over] = told(T0 + 2)
                    [wrong] = told(T0 + 3)
                    assert "big.pdf" in over and "limit" in over
                    assert "tool.pdf" in wrong and "file type I don't accept" in wrong
                    assert not told(T0) and not told(T0 + 1)
                    # the stranger got a pairing code, and their file was never asked for
                    async def paired_off() -> bool:
                        return any(s.get("recipient") == [STRANGER] for s in fake.sent)

                    await eventually(paired_off, timeout=30)
                    asked = [p["id"] for m, p in fake.calls if m == "getAttachment"]
                    # over the cap by its announced size: signal-cli was never asked
                    assert sorted(asked) == ["p1cTur3.png", "r3p0rt.pdf", "t00l.pdf"]
                    assert not (tmp_path / "data" / "groups" / "signal" / STRANGER
                                / "attachments").exists()
                finally:
                    await gw.stop()
    finally:
        await fake.stop()
