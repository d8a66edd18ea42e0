"""Each adapter's ``fetch_attachment`` against its protocol-faithful fake, with the real
SDK: an image and a document arrive as sent (from the ``Attachment`` the adapter itself
made of a platform event); a file over the cap raises ``AttachmentTooLarge``; a URL on
a host that is not the platform's is never asked (so its token cannot leak)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from channels.errors import AttachmentTooLarge, PermanentError
from channels.models import Attachment
from channels.slack import SlackChannel
from tests.channels.harness_discord import DiscordRig
from tests.channels.harness_slack import HttpHarness, http_harness
from tests.channels.harness_whatsapp import started
from tests.channels.kit import load_fixture
from tests.fakes.discord_api import snowflake
from tests.fakes.slack_api import signed_headers
from tests.media.files import pdf, png

IMAGE, DOC = png(), pdf()


async def test_whatsapp_media_by_id_then_url_with_the_token() -> None:
    async with started() as h:
        h.fake.media.files.update({"1003383421387256": IMAGE, "889412339912345": DOC})
        await h.inject("image_caption")
        await h.inject("document")
        image, doc = (m.attachments[0] for m in h.sink.received)
        assert await h.channel.fetch_attachment(image, 100_000) == IMAGE
        assert await h.channel.fetch_attachment(doc, 100_000) == DOC
        assert h.fake.media.downloads == ["1003383421387256", "889412339912345"]
        with pytest.raises(AttachmentTooLarge):  # the Graph API states the size first
            await h.channel.fetch_attachment(doc, len(DOC) - 1)
        assert len(h.fake.media.downloads) == 2


async def _slack_event(h: HttpHarness, files: list[dict[str, Any]]) -> None:
    payload = load_fixture("slack", "file_share")
    payload["event"]["files"] = files
    body = json.dumps(payload).encode()
    response = await h.client.post(h.slack.webhook_path, data=body,
                                   headers=signed_headers(body))
    assert response.status == 200


async def test_slack_url_private_with_the_bot_token_from_its_host_only() -> None:
    async with http_harness() as harness:
        assert isinstance(harness, HttpHarness)
        h, fake = harness, harness.fake
        fake.files.files.update({"T0TEAM001-F0PHOTO001": IMAGE, "T0TEAM001-F0REPORT01": DOC})
        foreign = fake.file_url("F0SPY0001", "x.png").replace("127.0.0.1", "localhost")
        await _slack_event(h, [
            {"id": "F0PHOTO001", "name": "cat.png", "mimetype": "image/png", "size": 10,
             "url_private": fake.file_url("F0PHOTO001", "cat.png")},
            {"id": "F0REPORT01", "name": "report.pdf", "mimetype": "application/pdf",
             "size": 10, "url_private": fake.file_url("F0REPORT01", "report.pdf")},
            {"id": "F0SPY0001", "name": "x.png", "mimetype": "image/png", "size": 10,
             "url_private": foreign}])
        [msg] = h.sink.received
        image, doc, spy = msg.attachments
        channel = h.channel
        assert isinstance(channel, SlackChannel)
        assert await channel.fetch_attachment(image, 100_000) == IMAGE
        assert await channel.fetch_attachment(doc, 100_000) == DOC
        with pytest.raises(AttachmentTooLarge):
            await channel.fetch_attachment(doc, len(DOC) - 1)
        with pytest.raises(PermanentError, match="file_host"):
            await channel.fetch_attachment(spy, 100_000)
        assert "T0TEAM001-F0SPY0001" not in fake.files.downloads


async def test_discord_attachment_from_its_cdn_only() -> None:
    async with DiscordRig() as rig:
        assert rig.channel is not None
        cid = rig.general["id"]
        pic_id, doc_id = snowflake(), snowflake()
        rig.fake.cdn.files.update({pic_id: IMAGE, doc_id: DOC})

        def att(aid: str, name: str, mime: str, data: bytes) -> dict[str, Any]:
            url = rig.fake.cdn_url(cid, aid, name)
            return {"id": aid, "filename": name, "size": len(data), "url": url,
                    "proxy_url": url, "content_type": mime}

        await rig.say(rig.general, "look", attachments=[
            att(pic_id, "cat.png", "image/png", IMAGE),
            att(doc_id, "plan.pdf", "application/pdf", DOC)])
        got = await rig.next_inbound()
        image, doc = got.attachments
        assert await rig.channel.fetch_attachment(image, 100_000) == IMAGE
        assert await rig.channel.fetch_attachment(doc, 100_000) == DOC
        with pytest.raises(AttachmentTooLarge):
            await rig.channel.fetch_attachment(doc, len(DOC) - 1)
        spy = Attachment(id="1", type="image",
                         url=rig.fake.cdn_url(cid, "1", "x.png").replace("127.0.0.1",
                                                                          "localhost"))
        with pytest.raises(PermanentError, match="file_host"):
            await rig.channel.fetch_attachment(spy, 100_000)
        assert rig.fake.cdn.downloads.count("1") == 0
