"""``send_file``: a file of the group's workspace, read out of its sandbox for the chat.

The file is read *inside* the sandbox like ``read_file`` (a symlink resolves there, where
nothing of the host exists), with its path checked the same way, and refused past
``[tools.limits] send_file_mb``. The host sends nothing itself: the bytes go back to the
worker (base64 in the result), which stores them where the gateway's outbox reads them
and publishes the file event (``workers.sendfile``).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import posixpath
from typing import Any

from gateway.toolhost.tools import ToolContext, ToolFailed, ToolOutput, workspace_path

MIB = 1024 * 1024
#: prints the size of a regular file (symlinks followed inside the sandbox), or fails
_SIZE = '[ -f "$1" ] || { echo "not a regular file" >&2; exit 2; }; stat -L -c %s -- "$1"'


async def send_file(ctx: ToolContext, args: dict[str, Any]) -> ToolOutput:
    path = workspace_path(args)
    cap = ctx.spec.limits.send_file_mb * MIB
    sized = await ctx.sandbox.run(ctx.spec, ["sh", "-c", _SIZE, "sh", path],
                                  timeout=ctx.timeout)
    if not sized.ok:
        why = sized.stderr.decode("utf-8", errors="replace").strip() or "cannot read it"
        raise ToolFailed(f"cannot send {path}: {why}")
    size = int(sized.stdout.decode().strip() or 0)
    if size > cap:
        raise ToolFailed(f"{path} is {size} bytes; send_file sends at most "
                         f"{ctx.spec.limits.send_file_mb} MiB")
    # the output cap is the file cap here (a file grown since is cut, and refused)
    limits = ctx.spec.limits.model_copy(update={"output_bytes": cap + 1})
    read = await ctx.sandbox.run(dataclasses.replace(ctx.spec, limits=limits),
                                 ["cat", "--", path], timeout=ctx.timeout)
    if not read.ok or len(read.stdout) > cap:
        raise ToolFailed(f"cannot send {path}: it could not be read whole within "
                         f"{ctx.spec.limits.send_file_mb} MiB")
    out = {"name": posixpath.basename(path), "size": len(read.stdout),
           "data": base64.b64encode(read.stdout).decode()}
    return ToolOutput(json.dumps(out), source=f"send_file: {path}")
