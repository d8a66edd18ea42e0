"""``send_file`` as the model sees it: a workspace file sent to the chat, once.

The tool host reads the file out of the group's sandbox (path checked, size capped:
``gateway.toolhost.sendfile``) and hands the bytes back. The worker stores them under the
chat's group dir by content hash (``outbox_files/<sha256>``, crash-safe, with the reply
id naming it: ``memory_store.files._outboxfiles``) and puts one
``file`` event on the outbox (``gateway.queue.events.file``) whose reply id is derived
from the turn, the path and the hash: a retried turn or a redelivered event is sent once
(the outbox's sent mark, and the adapter's own dedupe where the platform has one). The
model sees only what happened (name and size), as tool output.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json

from pydantic_ai import RunContext, Tool

from channels.models import Outbound
from gateway.queue import events
from gateway.queue.toolcalls import ToolResult
from memory_store import GroupDirectory
from memory_store.files import outboxfiles
from workers.host_tools import HostLink, call_host, offered, render_tool_output
from workers.prompt import anchor_of
from workers.tools import TurnDeps

TOOL = "send_file"


def file_reply_id(turn_id: str, path: str, sha256: str) -> str:
    digest = hashlib.sha256(f"{path}\x1f{sha256}".encode()).hexdigest()[:16]
    return f"{turn_id}.file.{digest}"


def _deliver(link: HostLink, deps: TurnDeps, path: str, caption: str,
             result: ToolResult) -> str:
    """Store the file and publish its event; what the model is told (blocking)."""
    got = json.loads(result.output)
    data = base64.b64decode(got["data"])
    sha = hashlib.sha256(data).hexdigest()
    if link.data_dir is None:
        raise ValueError("no data dir to keep the file in")
    reply_id = file_reply_id(deps.turn_id, path, sha)
    # kept with the send naming it, so the gateway's sweep drops it once sent
    outboxfiles.store(GroupDirectory(link.data_dir, deps.group).path / events.FILES_FOLDER,
                      sha, data, reply_id)
    chat = anchor_of(deps.messages, deps.engaged)
    out = Outbound(channel=chat.channel, account=chat.account, chat_id=chat.chat_id,
                   thread_id=chat.thread_id, text=caption, reply_id=reply_id)
    event = events.file(out, sha, str(got["name"]), len(data))
    link.client.xadd(link.keys.outbox, event.fields())  # type: ignore[arg-type]
    return f"sent {got['name']} ({len(data)} bytes) to the chat"


async def send_file(ctx: RunContext[TurnDeps], path: str, caption: str = "") -> str:
    """Send a file from this chat's workspace to the chat (as a document), once.

    Args:
        path: the file's path relative to the workspace.
        caption: a short text shown with the file.
    """
    deps = ctx.deps
    link = deps.host
    source = f"send_file: {path}"
    if link is None or TOOL not in link.allowed:
        return f"Refused: {TOOL} is not available in this chat."
    args = {"path": path, "caption": caption}
    result = await call_host(deps, link, TOOL, args)
    if not result.ok:
        return render_tool_output(TOOL, source, False, result.output, result.error)
    try:
        said = await asyncio.to_thread(_deliver, link, deps, path, caption, result)
    except (ValueError, KeyError, OSError) as err:
        return render_tool_output(TOOL, source, False, "", f"the file was not sent ({err})")
    return render_tool_output(TOOL, source, True, said, "")


def file_tools() -> list[Tool[TurnDeps]]:
    """``send_file`` (hidden in a turn whose group may not use it)."""
    return [Tool(send_file, takes_ctx=True, prepare=offered)]
