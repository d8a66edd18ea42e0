"""The MCP tools a turn may offer: read from the tool host's heartbeat, filtered by the
group's ``mcp`` allowlist (``gateway.config.mcp.allows``).

The tool host publishes each connected server's tools (``server.tool``, the name the
model sees, the server's description and input schema) in ``tools:host``; a worker keeps
those its group may use. The host checks the allowlist again on every call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.config.mcp import allows

#: characters of a server's tool description shown to the model: a description is the
#: server's text, so it is kept short
DESCRIPTION_MAX = 1000


@dataclass(frozen=True)
class McpOffer:
    """One MCP tool this turn may call."""

    name: str  # "server.tool": the wire's and the allowlist's name
    model_name: str  # what the model calls it
    description: str
    schema: dict[str, Any]


def mcp_offers(status: dict[str, Any], entries: frozenset[str]) -> tuple[McpOffer, ...]:
    """The tools in the host's ``status`` that a group with allowlist ``entries`` may
    use (a malformed entry is skipped: the heartbeat is the host's, not the model's)."""
    out: list[McpOffer] = []
    listed = status.get("mcp")
    for raw in listed if isinstance(listed, list) else []:
        try:
            name, shown = str(raw["name"]), str(raw["model_name"])
            schema = raw["schema"]
        except (KeyError, TypeError):
            continue
        server, _, tool = name.partition(".")
        if not isinstance(schema, dict) or not tool or not allows(entries, server, tool):
            continue
        out.append(McpOffer(name, shown, str(raw.get("description") or "")[:DESCRIPTION_MAX],
                            schema))
    return tuple(out)
