"""What an MCP tool result becomes for the model, and the names its tools go by.

A result's text content is kept as is; any other content (images, audio, resources) is
described in one line, never passed through (the worker's model sees text only). The
whole is cut at the host's output cap. Names: the wire and the allowlists say
``server.tool``; models accept only ``[A-Za-z0-9_-]{1,64}`` (OpenAI's and Anthropic's
rule), so the model sees ``server__tool``, cleaned and, when too long, shortened with a
hash that keeps it unique.
"""

from __future__ import annotations

import hashlib
import json
import re

from mcp import types

#: characters a model-visible tool name may hold (OpenAI, Anthropic)
_BAD = re.compile(r"[^A-Za-z0-9_-]")
MODEL_NAME_MAX = 64


def model_name(server: str, tool: str) -> str:
    """The model-visible name of ``server``'s ``tool``."""
    name = _BAD.sub("_", f"{server}__{tool}")
    if len(name) <= MODEL_NAME_MAX and name == f"{server}__{tool}":
        return name
    # cleaned or cut: a hash of the real name keeps two such tools apart
    digest = hashlib.sha256(f"{server}.{tool}".encode()).hexdigest()[:8]
    return f"{name[:MODEL_NAME_MAX - 9]}_{digest}"


def _describe(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent | types.AudioContent):
        kind = "image" if isinstance(block, types.ImageContent) else "audio"
        return f"[{kind} content, {block.mimeType}, {len(block.data) * 3 // 4} bytes, not shown]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link: {block.uri} ({block.name})]"
    if isinstance(block, types.EmbeddedResource):
        res = block.resource
        if isinstance(res, types.TextResourceContents):
            return f"[resource {res.uri}]\n{res.text}"
        return f"[binary resource {res.uri}, {res.mimeType or 'unknown type'}, not shown]"
    return f"[{type(block).__name__} content, not shown]"


def render_result(result: types.CallToolResult, cap: int) -> str:
    """The result's content as text for the model, at most ``cap`` bytes."""
    parts = [_describe(b) for b in result.content]
    if not parts and result.structuredContent is not None:
        parts.append(json.dumps(result.structuredContent, ensure_ascii=False))
    text = "\n".join(parts) or "(no output)"
    raw = text.encode()
    if len(raw) > cap:
        text = raw[:cap].decode(errors="ignore") + f"\n[cut at {cap} bytes]"
    return text
