"""The MCP tools as the model sees them, built for each turn from the tool host's offer.

Which MCP tools exist is known only at run time (the servers are the tool host's), so
they are a pydantic-ai ``DynamicToolset``: for each turn, one ``Tool.from_schema`` per
tool in ``HostLink.mcp`` (already cut to the group's allowlist), under its model-visible
name, with the server's JSON schema. A call goes to the tool host like a sandbox tool's
(``gateway.queue.toolcalls``), and what comes back is data with the source
``mcp <server>.<tool>``, at tool trust (``workers.host_tools.model_call``, as for a
sandbox tool); the turn's ``read_trust`` drops to it. A tool marked ``approve`` is
recorded for an admin's ``/approve`` like a sandbox tool.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import RunContext, Tool
from pydantic_ai.toolsets import DynamicToolset, FunctionToolset

from workers.host_tools import model_call
from workers.mcp_offers import McpOffer
from workers.tools import TurnDeps


def _tool(offer: McpOffer) -> Tool[TurnDeps]:
    async def call(ctx: RunContext[TurnDeps], **args: Any) -> str:
        return await model_call(ctx, offer.name, args, f"mcp {offer.name}", offer.model_name)

    return Tool.from_schema(call, name=offer.model_name,
                            description=f"(MCP tool {offer.name}) {offer.description}",
                            json_schema=offer.schema, takes_ctx=True)


def _for_turn(ctx: RunContext[TurnDeps]) -> FunctionToolset[TurnDeps] | None:
    link = ctx.deps.host
    if link is None or not link.mcp:
        return None
    return FunctionToolset([_tool(o) for o in link.mcp])


def mcp_toolset() -> DynamicToolset[TurnDeps]:
    """The MCP tools of each turn's group (none when it may use none)."""
    return DynamicToolset(_for_turn, per_run_step=False)
