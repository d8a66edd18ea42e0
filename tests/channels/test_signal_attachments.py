"""Signal attachments downloaded from signal-cli (issue 28): a voice note, an image and
a document reach the sink as attachments and are fetched with ``getAttachment``, byte
for byte; a file over the cap is refused before asking when its announced size says so,
and is not read to its end when it does not."""

from __future__ import annotations

import pytest

from channels.errors import AttachmentTooLarge, PermanentError
from channels.models import Attachment
from channels.signal.attachments import answer_limit
from tests.channels.harness_signal import signal_harness
from tests.channels.media_samples import CAP, DOCUMENT, IMAGE, VOICE, oversized
from tests.fakes.signal_cli import data_message

T0 = 1_700_000_300_000


def _pointer(attachment_id: str, mime: str, data: bytes, name: str | None = None,
             announced: int | None = None) -> dict[str, object]:
    """An attachment as signal-cli's ``JsonAttachment`` lists it in a receive event."""
    out: dict[str, object] = {"contentType": mime, "id": attachment_id,
                              "size": len(data) if announced is None else announced,
                              "uploadTimestamp": T0}
    if name is not None:
        out["filename"] = name
    return out


async def test_voice_image_and_document_are_fetched_byte_for_byte() -> None:
    files = {"8kA2vQ.ogg": ("audio/ogg", VOICE, None),
             "p0Zq1c.jpg": ("image/jpeg", IMAGE, None),
             "Xw3dE9.pdf": ("application/pdf", DOCUMENT, "minutes.pdf")}
    async with signal_harness() as h:
        h.fake.attachments.update({k: data for k, (_, data, _) in files.items()})
        await h.fake.receive(data_message("", timestamp=T0, attachments=[
            _pointer(k, mime, data, name) for k, (mime, data, name) in files.items()]))
        [inbound] = await h.sink.wait_for(1)
        kinds = [(a.type, a.name) for a in inbound.attachments]
        assert kinds == [("audio", None), ("image", None), ("document", "minutes.pdf")]
        for attachment in inbound.attachments:
            got = await h.channel.fetch_attachment(attachment, CAP)
            assert got == files[attachment.id][1]


async def test_an_announced_size_over_the_cap_is_refused_without_asking() -> None:
    async with signal_harness() as h:
        h.fake.attachments["big.mp4"] = oversized(CAP + 1)
        before = len(h.fake.calls)
        with pytest.raises(AttachmentTooLarge):
            await h.channel.fetch_attachment(
                Attachment(id="big.mp4", type="video", size=CAP + 1), CAP)
        assert len(h.fake.calls) == before  # signal-cli was never asked


async def test_a_file_bigger_than_announced_is_not_read_to_its_end() -> None:
    big = oversized()
    async with signal_harness() as h:
        h.fake.attachments["liar.bin"] = big
        with pytest.raises(AttachmentTooLarge):
            await h.channel.fetch_attachment(
                Attachment(id="liar.bin", type="document", size=10), CAP)
        # the answer is 4/3 of the file: far more than the fetch read before it hung up
        assert 0 < h.fake.written < len(big)
        assert answer_limit(CAP) < len(big)


async def test_a_gone_attachment_is_permanent() -> None:
    async with signal_harness() as h:
        with pytest.raises(PermanentError, match="attachment gone"):
            await h.channel.fetch_attachment(Attachment(id="nope", type="image"), CAP)
        with pytest.raises(PermanentError, match="not downloadable"):
            await h.channel.fetch_attachment(Attachment(id="p:1", type="sticker"), CAP)
