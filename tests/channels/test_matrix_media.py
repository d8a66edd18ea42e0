"""Matrix media downloaded from a REAL Synapse (issue 28): a voice note (``m.audio``), an
image and a document reach the sink as attachments and are fetched byte for byte through
the authenticated media API; in an encrypted room the file on the server is ciphertext
and the fetch decrypts it; a file over the cap is refused before its body is read."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nio import RoomSendResponse, UploadResponse

from channels.errors import AttachmentTooLarge, PermanentError
from channels.matrix import MatrixChannel
from channels.models import Attachment
from tests.channels.kit import RecordingSink
from tests.channels.matrix_people import Human
from tests.channels.media_samples import CAP, DOCUMENT, IMAGE, VOICE, oversized
from tests.channels.synapse import SynapseServer
from tests.channels.tcp_relay import TcpRelay
from tests.channels.test_matrix_e2e import _register, synapse

pytestmark = pytest.mark.slow
_ = synapse  # the session's one Synapse (a fixture)


class Room:
    def __init__(self, channel: MatrixChannel, sink: RecordingSink, ann: Human,
                 room_id: str) -> None:
        self.channel, self.sink, self.ann, self.room_id = channel, sink, ann, room_id

    async def send_file(self, msgtype: str, data: bytes, mime: str, name: str, *,
                        encrypt: bool = False, announce_size: bool = True) -> str:
        """Upload ``data`` as Ann's client does and post the event naming it."""
        answer, keys = await self.ann.client.upload(
            io.BytesIO(data), content_type=mime, filename=name, encrypt=encrypt,
            filesize=len(data))
        assert isinstance(answer, UploadResponse), answer
        content: dict[str, Any] = {"msgtype": msgtype, "body": name,
                                   "info": {"mimetype": mime}}
        if announce_size:
            content["info"]["size"] = len(data)
        if encrypt:
            assert keys is not None
            content["file"] = {**keys, "url": answer.content_uri}
        else:
            content["url"] = answer.content_uri
        sent = await self.ann.client.room_send(self.room_id, "m.room.message", content,
                                               ignore_unverified_devices=True)
        assert isinstance(sent, RoomSendResponse), sent
        return str(sent.event_id)


@pytest.fixture
async def open_room(synapse: SynapseServer, tmp_path: Path
                    ) -> AsyncIterator[Any]:
    bot, ann_account = _register(synapse, "bot"), _register(synapse, "ann")
    made: list[tuple[MatrixChannel, Human]] = []

    async def make(encrypted: bool, homeserver: str | None = None) -> Room:
        block = {"homeserver": homeserver or synapse.url, "user_id": bot.user_id,
                 "sync_timeout": 1,
                 "invite_allow": [ann_account.user_id], "store_dir": str(tmp_path / "bot")}
        channel = MatrixChannel.from_config("default", block,
                                            {"MATRIX_PASSWORD": bot.password})
        sink = RecordingSink()
        await channel.start(sink)
        ann = Human(synapse.url, ann_account, tmp_path / "ann", e2e=encrypted)
        made.append((channel, ann))
        await ann.sync()
        room_id = await ann.create_room([bot.user_id], encrypted=encrypted)
        await ann.wait_joined(room_id, bot.user_id)
        return Room(channel, sink, ann, room_id)

    yield make
    for channel, ann in made:
        await channel.stop()
        await ann.close()


async def test_voice_image_and_document_are_fetched_byte_for_byte(open_room: Any) -> None:
    room: Room = await open_room(False)
    files = [("m.audio", VOICE, "audio/ogg", "voice-message.ogg"),
             ("m.image", IMAGE, "image/png", "screenshot.png"),
             ("m.file", DOCUMENT, "application/pdf", "minutes.pdf")]
    for msgtype, data, mime, name in files:
        await room.send_file(msgtype, data, mime, name)
    got = await room.sink.wait_for(3)
    assert [(i.attachments[0].type, i.attachments[0].name) for i in got] == [
        ("audio", "voice-message.ogg"), ("image", "screenshot.png"),
        ("document", "minutes.pdf")]
    for inbound, (_, data, _, _) in zip(got, files, strict=True):
        assert await room.channel.fetch_attachment(inbound.attachments[0], CAP) == data


async def test_encrypted_media_is_decrypted(open_room: Any) -> None:
    room: Room = await open_room(True)
    assert room.channel.encrypted, "matrix-nio's e2e extra should be installed"
    await room.send_file("m.audio", VOICE, "audio/ogg", "voice-message.ogg", encrypt=True)
    [inbound] = await room.sink.wait_for(1)
    [attachment] = inbound.attachments
    assert attachment.url and "#" in attachment.url  # the key travels with the message
    assert await room.channel.fetch_attachment(attachment, CAP) == VOICE
    # what the server holds is ciphertext: fetched without the key it is not the file
    bare = attachment.model_copy(update={"url": attachment.url.partition("#")[0]})
    stored = await room.channel.fetch_attachment(bare, CAP)
    assert len(stored) == len(VOICE) and stored != VOICE
    # a key that does not match the file fails its check, never yields garbage
    wrong = attachment.url.replace("sha256=", "sha256=AAAA")
    with pytest.raises(PermanentError, match="corrupt"):
        await room.channel.fetch_attachment(attachment.model_copy(update={"url": wrong}), CAP)


async def test_a_file_over_the_cap_stops_early(open_room: Any, synapse: SynapseServer
                                               ) -> None:
    # the bot reaches Synapse through a relay that counts what Synapse sends on each
    # connection (a download opens its own)
    relay = await TcpRelay(synapse.port).start()
    try:
        room: Room = await open_room(False, f"http://127.0.0.1:{relay.port}")
        await _over_the_cap(room, relay)
    finally:
        await relay.stop()


async def _over_the_cap(room: Room, relay: TcpRelay) -> None:
    big = oversized()
    await room.send_file("m.file", big, "application/zip", "big.zip")
    await room.send_file("m.file", big, "application/zip", "unsized.zip",
                         announce_size=False)
    announced, unsized = [i.attachments[0] for i in await room.sink.wait_for(2)]
    assert announced.size == len(big) and unsized.size is None
    before = len(relay.downstream)
    with pytest.raises(AttachmentTooLarge):  # by the event's size: Synapse is not asked
        await room.channel.fetch_attachment(announced, CAP)
    assert len(relay.downstream) == before
    with pytest.raises(AttachmentTooLarge):  # by Content-Length: the body is not read
        await room.channel.fetch_attachment(unsized, CAP)
    [took] = relay.downstream[before:]
    assert took < len(big) // 2, took
    assert len(await room.channel.fetch_attachment(unsized, len(big))) == len(big)
    with pytest.raises(PermanentError, match="gone"):
        await room.channel.fetch_attachment(Attachment(
            id="$x", type="image", url=f"mxc://localhost/{'n' * 24}"), CAP)
