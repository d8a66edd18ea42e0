"""The media store and sniffer: content-addressed, idempotent, names never paths, types
from bytes, image bombs refused from the header."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from gateway.intake import GroupFiles
from gateway.media import Received, Refused, put, sniff, used_bytes
from memory_store import GroupDirectory
from memory_store.files import attachments as files
from tests.media.files import exe, pdf, png, png_bomb

GROUP = "telegram:-100"


def test_types_come_from_the_bytes_not_the_name() -> None:
    assert sniff(png()).mime == "image/png"
    assert (sniff(png()).width, sniff(png()).height) == (4, 3)
    assert sniff(pdf()).ext == "pdf"
    assert sniff("grüße\n".encode()).mime == "text/plain"
    with pytest.raises(Refused):
        sniff(exe())
    with pytest.raises(Refused):
        sniff(b"\x00\x01\x02binary")


def test_png_bomb_is_refused_without_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    bomb = png_bomb()
    assert len(bomb) < 100_000  # small on the wire, 2.5 gigapixels claimed
    decoded: list[str] = []
    real_load = Image.Image.load

    def spy(self: Image.Image) -> object:  # records any decode of pixel data
        decoded.append(self.format or "?")
        return real_load(self)

    monkeypatch.setattr(Image.Image, "load", spy)
    with pytest.raises(Refused, match="too large"):
        sniff(bomb)
    assert decoded == []


def test_put_is_content_addressed_and_idempotent(tmp_path: Path) -> None:
    gf = GroupFiles(tmp_path)
    data = png()
    came = Received("telegram", "7", "../../etc/passwd", 1000.0)
    first = put(gf, GROUP, data, sniff(data), came)
    again = put(gf, GROUP, data, sniff(data), came)  # a redone download
    assert first == again
    folder = gf.attachments(GROUP)
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == \
        [f"{first.sha256}.json", first.stored]
    side = json.loads((folder / f"{first.sha256}.json").read_text())
    assert side["name"] == "../../etc/passwd"  # data, never a path
    assert [m["message_id"] for m in side["messages"]] == ["7"]
    assert side["mime"] == "image/png" and side["size"] == len(data)
    assert used_bytes(gf, GROUP) == len(data)


def test_forgetting_the_last_message_removes_the_file(tmp_path: Path) -> None:
    gf = GroupFiles(tmp_path)
    data = pdf()
    put(gf, GROUP, data, sniff(data), Received("telegram", "1", "a.pdf", 1.0))
    stored = put(gf, GROUP, data, sniff(data), Received("telegram", "2", "b.pdf", 2.0))
    gd = GroupDirectory(tmp_path, GROUP)
    assert files.forget_messages(gd, ["1"]) == []
    assert files.load(gd, stored.stored) == data
    assert files.forget_messages(gd, ["2"]) == [stored.stored]
    with pytest.raises(FileNotFoundError):
        files.load(gd, stored.stored)


def test_a_removed_file_takes_its_transcript_along(tmp_path: Path) -> None:
    """A voice note's transcript is its words: deleting the message (or ``/forget``, or
    retention) removes it with the file."""
    gf = GroupFiles(tmp_path)
    data = pdf()
    stored = put(gf, GROUP, data, sniff(data), Received("telegram", "1", "a.pdf", 1.0))
    gd = GroupDirectory(tmp_path, GROUP)
    folder = files.folder(gd)
    sha = stored.stored.partition(".")[0]
    (folder / f"{sha}{files.TRANSCRIPT_SUFFIX}").write_text("water the plants")
    (folder / f"{sha}{files.TRANSCRIPT_FAILED_SUFFIX}").write_text("an old failure")
    assert files.read_transcript(folder, sha) == files.Transcript("water the plants")
    assert files.forget_messages(gd, ["1"]) == [stored.stored]
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == []
