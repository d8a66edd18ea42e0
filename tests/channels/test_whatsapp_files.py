"""Files to WhatsApp beyond the shared send_file test: which message a file becomes
(Cloud API supported media types), and the ones WhatsApp does not take, refused in
words for the outbox's note before anything is uploaded."""

from __future__ import annotations

import pytest

from channels.errors import PermanentError
from channels.whatsapp.errors import OutsideWindow
from tests.channels.harness_whatsapp import ALICE, started

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8


@pytest.mark.asyncio
async def test_a_png_goes_as_an_image_and_other_types_are_refused() -> None:
    async with started() as h:
        msg = h.outbound("unused").model_copy(update={"reply_id": "turn-1.file.img"})
        assert await h.channel.send_file(msg, PNG, "chart.png", "the chart")
        [body] = h.fake.sent
        assert body["type"] == "image" and body["image"]["caption"] == "the chart"
        assert h.fake.uploads[body["image"]["id"]][1] == "image/png"
        assert h.fake.media.files[body["image"]["id"]] == PNG
        zipped = msg.model_copy(update={"reply_id": "turn-1.file.zip"})
        with pytest.raises(PermanentError, match="WhatsApp takes PDF, text and Office "
                                                 "documents and JPEG or PNG images, not "
                                                 "application/zip"):
            await h.channel.send_file(zipped, b"PK\x03\x04", "code.zip")
        assert len(h.fake.uploads) == 1  # nothing more uploaded


@pytest.mark.asyncio
async def test_no_file_goes_outside_the_24_hour_window() -> None:
    async with started() as h:
        h.cursors.values.pop(f"window:{ALICE}")  # Alice never wrote
        msg = h.outbound("unused").model_copy(update={"reply_id": "turn-1.file.late"})
        with pytest.raises(OutsideWindow):
            await h.channel.send_file(msg, b"%PDF-1.7", "report.pdf")
        assert h.fake.sent == [] and h.fake.uploads == {}
