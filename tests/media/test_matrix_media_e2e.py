"""Matrix files end to end against a REAL Synapse: Ann's client uploads (encrypted, in an
encrypted room) and posts m.image/m.file events -> the bot's MatrixChannel (/sync,
through a relay that records what the bot asks Synapse for) -> gateway (hold, media job:
the authenticated media download, decrypted) -> a real worker whose scripted model takes
images -> the bot's replies, which Ann's client decrypts."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import pytest
from nio import RoomSendResponse, UploadResponse

from channels.matrix.media import DOWNLOAD_PATH
from gateway.app import Gateway
from gateway.config import load_config
from tests.channels.e2e import valkey, worker
from tests.channels.kit import eventually
from tests.channels.matrix_people import Human
from tests.channels.synapse import SERVER_NAME, SynapseServer
from tests.channels.tcp_relay import TcpRelay
from tests.channels.test_matrix_e2e import _register, synapse
from tests.media.files import exe, pdf, png
from tests.media.stack import FILE_CAP, answered, config, saw_files

pytestmark = pytest.mark.slow  # Synapse starts once per session (about 5 s)
_ = synapse  # the session's one Synapse (a fixture)


async def _send_file(person: Human, room_id: str, msgtype: str, data: bytes, mime: str,
                     name: str, caption: str, *, encrypt: bool) -> tuple[str, str]:
    """Upload ``data`` as a client does and post the event naming it, with a caption
    (a body that is not the file name); returns (event id, media id)."""
    answer, keys = await person.client.upload(io.BytesIO(data), content_type=mime,
                                              filename=name, encrypt=encrypt,
                                              filesize=len(data))
    assert isinstance(answer, UploadResponse), answer
    content: dict[str, Any] = {"msgtype": msgtype, "body": caption, "filename": name,
                               "info": {"mimetype": mime, "size": len(data)}}
    if encrypt:
        assert keys is not None
        content["file"] = {**keys, "url": answer.content_uri}
    else:
        content["url"] = answer.content_uri
    sent = await person.client.room_send(room_id, "m.room.message", content,
                                         ignore_unverified_devices=True)
    assert isinstance(sent, RoomSendResponse), sent
    return str(sent.event_id), str(answer.content_uri).rpartition("/")[2]


async def test_matrix_files_refusals_and_a_stranger(synapse: SynapseServer,
                                                    tmp_path: Path) -> None:
    image, doc, tool = png(), pdf(), exe()
    big = pdf() + b"%" * (FILE_CAP + 10)
    bot, ann_account = _register(synapse, "bot"), _register(synapse, "ann")
    mallory_account = _register(synapse, "mallory")
    relay = await TcpRelay(synapse.port).start()
    ann = Human(synapse.url, ann_account, tmp_path / "ann", e2e=True)
    mallory = Human(synapse.url, mallory_account, tmp_path / "mallory")
    invite = f'["{ann_account.user_id}", "{mallory_account.user_id}"]'
    tables = f"""
[channels.matrix]
homeserver = "http://127.0.0.1:{relay.port}"
user_id = "{bot.user_id}"
invite_allow = {invite}
sync_timeout = 1
backoff_initial = 0.05
backoff_max = 0.5
"""
    try:
        with valkey(tmp_path) as url:
            path = config(tmp_path / "pynanoclaw.toml", url, tables,
                          allow=f"matrix:{ann_account.user_id}")
            with worker(path, url, {"PNC_TEST_REDIS_URL": url}):
                gw = Gateway(load_config(path), url, env={"MATRIX_PASSWORD": bot.password},
                             consumer="mx-media")
                await gw.start()
                try:
                    await ann.sync()
                    room = await ann.create_room([bot.user_id], encrypted=True)
                    await ann.wait_joined(room, bot.user_id)
                    files = [("m.image", image, "image/png", "chart.png",
                              "what is in this picture?"),
                             ("m.file", doc, "application/pdf", "report.pdf",
                              "here is the report"),
                             ("m.file", big, "application/pdf", "big.pdf",
                              "and this big one?"),
                             ("m.file", tool, "application/pdf", "tool.pdf",  # bytes win
                              "and this tool?")]
                    sent = [await _send_file(ann, room, *f, encrypt=True) for f in files]
                    spy_room = await mallory.create_room([bot.user_id])
                    await mallory.wait_joined(spy_room, bot.user_id)
                    _, spy_media = await _send_file(mallory, spy_room, "m.image", image,
                                                    "image/png", "x.png", "hi",
                                                    encrypt=False)
                    await answered(url, *(event for event, _ in sent))

                    prompt = saw_files(url, image, doc)
                    image_sha = hashlib.sha256(image).hexdigest()
                    doc_sha = hashlib.sha256(doc).hexdigest()
                    for *_, caption in files:  # each caption answered, files kept or not
                        assert caption in prompt
                    stored = sorted(p.name for p in (tmp_path / "data" / "groups" / "matrix")
                                    .glob("*/attachments/*") if p.name[0] != ".")
                    assert stored == sorted([f"{image_sha}.png", f"{image_sha}.json",
                                             f"{doc_sha}.pdf", f"{doc_sha}.json"])

                    def told(event_id: str) -> list[str]:
                        return [str(m["content"]["body"])
                                for m in ann.messages_from(bot.user_id, room)
                                if "couldn't take" in str(m["content"].get("body"))
                                and m["content"].get("m.relates_to", {})
                                .get("m.in_reply_to", {}).get("event_id") == event_id]

                    async def refusals() -> bool:
                        await ann.sync(timeout_ms=500)
                        return bool(told(sent[2][0])) and bool(told(sent[3][0]))

                    await eventually(refusals, timeout=30)
                    [over], [wrong] = told(sent[2][0]), told(sent[3][0])
                    assert "big.pdf" in over and "limit" in over
                    assert "tool.pdf" in wrong and "file type I don't accept" in wrong
                    assert not told(sent[0][0]) and not told(sent[1][0])
                    # in the encrypted room, the refusals went out encrypted like any reply
                    assert all(m["event_id"] in ann.decrypted
                               for m in ann.messages_from(bot.user_id, room))
                    # the stranger got a pairing code; their file was never asked for,
                    # nor the big one (over the cap by its announced size)
                    await mallory.wait_for_messages(bot.user_id, 1, spy_room)
                    asked = b"".join(relay.upstream)

                    def downloaded(media_id: str) -> bool:
                        return f"{DOWNLOAD_PATH}/{SERVER_NAME}/{media_id}".encode() in asked

                    assert [downloaded(media) for _, media in sent] == [True, True, False,
                                                                        True]
                    assert not downloaded(spy_media)
                finally:
                    await gw.stop()
    finally:
        await ann.close()
        await mallory.close()
        await relay.stop()
