"""What a turn shows the model of the files in its batch.

Every attachment is described in the transcript (``describe``: type, the original name
quoted as data, mime, size, and the stored file by hash or why it was not kept). With a
model that takes images (``[model] images``, ``ModelConfig.takes_images``) the stored
images also go to it as images (``images``), each after a label naming its file, newest
last and at most ``MAX_IMAGES``: the gateway sniffed them and refused bombs before they
were stored, so nothing here decodes a pixel.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic_ai import BinaryContent

from channels.models import Attachment, Inbound
from memory_store import GroupDirectory
from memory_store.files import attachments as files

#: images shown per turn (the newest); the others are described only
MAX_IMAGES = 4


def describe(att: Attachment) -> str:
    parts = [att.type]
    if att.name:
        parts.append(repr(att.name[:200]))
    if att.mime:
        parts.append(att.mime)
    if att.size is not None:
        parts.append(f"{att.size} bytes")
    if att.stored:
        parts.append(f"file {att.stored}")
    elif att.refused:
        parts.append(f"not kept: {att.refused}")
    if att.transcript:  # the sender's words as a machine heard them
        parts.append(f"-- {att.transcript}")
    return " ".join(parts)


def images(data_dir: Path, group: str, messages: Sequence[Inbound]
           ) -> list[str | BinaryContent]:
    """Label and content of the batch's stored images (newest ``MAX_IMAGES``); a file
    deleted since (``/forget``, retention) is skipped."""
    wanted = [(m, a) for m in messages for a in m.attachments
              if a.stored and (a.mime or "").startswith("image/")][-MAX_IMAGES:]
    if not wanted:
        return []
    gd = GroupDirectory(data_dir, group)
    out: list[str | BinaryContent] = []
    for msg, att in wanted:
        assert att.stored is not None and att.mime is not None
        try:
            data = files.load(gd, att.stored)
        except OSError:
            continue
        out += [f"Image {att.stored} from message {msg.message_id}:",
                BinaryContent(data=data, media_type=att.mime)]
    return out
