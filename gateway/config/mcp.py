"""``[tools.mcp.<name>]``: one MCP server the tool host runs (issue 26, MCP part).

A server is either a command (``command`` + ``args``, spoken to over stdio) or a ``url``
(streamable HTTP). Its secrets never appear in the TOML: ``env`` *names* variables of the
tool host's environment; a stdio server's child gets those (and the SDK's safe minimum:
PATH, HOME, ...) and nothing else of the host's; an HTTP server's ``headers`` values may
use them as ``${NAME}`` (``Authorization = "Bearer ${CRM_TOKEN}"``), filled in by the
tool host only. Which groups may use which server or tool is the group's ``mcp``
allowlist (``gateway.config.tools``): ``"server"`` (all its tools) or ``"server.tool"``.
"""

from __future__ import annotations

import re

from pydantic import Field, field_validator, model_validator

from gateway.config.base import ENV_NAME, Section

#: ``${NAME}`` in a header's value
ENV_REF = re.compile(r"\$\{([^}]*)\}")
#: a server's name: it prefixes its tools' names, which models accept only in this set
SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


class McpServer(Section):
    """One server's transport, secrets (by name) and call timeout."""

    command: str | None = None
    args: list[str] = Field(default_factory=list)
    url: str | None = None
    #: names of the tool host's environment variables this server gets (stdio: in the
    #: child's environment; HTTP: usable as ``${NAME}`` in ``headers``)
    env: list[str] = Field(default_factory=list)
    #: HTTP headers; a value's ``${NAME}`` is the tool host's variable NAME (in ``env``)
    headers: dict[str, str] = Field(default_factory=dict)
    #: seconds one call may take (the drain job's remaining time may cut it shorter)
    timeout: float = Field(default=30.0, gt=0, le=3600)
    #: this server's tools that only read: a retried turn runs their calls again (with
    #: no record); every other call runs once per turn (``gateway.queue.toolonce``)
    rerun: list[str] = Field(default_factory=list)

    @field_validator("env")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        bad = [n for n in v if not ENV_NAME.fullmatch(n)]
        if bad:
            raise ValueError(f"env lists variable names, not values: {len(bad)} entry(ies) "
                             "are not names")  # the entry itself may be a pasted secret
        return v

    @field_validator("url")
    @classmethod
    def _http(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("url must be an http:// or https:// URL")
        return v

    @model_validator(mode="after")
    def _one_transport(self) -> McpServer:
        if (self.command is None) == (self.url is None):
            raise ValueError("set either command (stdio) or url (streamable HTTP)")
        if self.command is not None and self.headers:
            raise ValueError("headers are for url servers; a command server gets env")
        for header, value in self.headers.items():
            missing = [n for n in ENV_REF.findall(value) if n not in self.env]
            if missing:
                raise ValueError(f"header {header!r} uses ${{{missing[0]}}}, which is not "
                                 "named in env")
        return self


def check_servers(servers: dict[str, McpServer]) -> dict[str, McpServer]:
    for name in servers:
        if not SERVER_NAME.match(name):
            raise ValueError(f"MCP server name {name!r}: letters, digits, '_' and '-' "
                             "only (it prefixes the tools' names), at most 32")
    return servers


def allows(entries: frozenset[str], server: str, tool: str) -> bool:
    """Whether a group's ``mcp`` allowlist lets it use ``server``'s ``tool``."""
    return server in entries or f"{server}.{tool}" in entries
