"""``[tools]``: what the agent may do beyond memory (issue 26, first part: the sandbox).

The sandbox tools (``run_command``, ``read_file``, ``write_file``, ``list_files``) are
off unless ``[tools] sandbox = true`` or a group's override turns them on: they run code
a chat asked for, so an operator opts in. A group's override (``[tools.groups."<channel:
chat>"]``) replaces the keys it sets and keeps the rest. Extra read-only mounts come only
from ``mount_roots`` (the operator's allowlist): each group mount must resolve, symlinks
followed, under one of them (checked again by the tool host before every command).
MCP servers are ``[tools.mcp.<name>]`` (``gateway.config.mcp``); no group may use one
until ``mcp_allow`` or the group's ``mcp`` names it.
``fetch`` (an HTTP GET from the tool host) is on where ``fetch_hosts`` lists a host.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from gateway.config.base import Section, group_keyed
from gateway.config.mcp import McpServer, check_servers

#: the tools the sandbox offers (one name each in the tool host's registry)
SANDBOX_TOOLS = ("run_command", "read_file", "write_file", "list_files", "send_file")
#: HTTP GET from the tool host itself (gateway.toolhost.fetch): on where ``fetch_hosts``
#: lists a host
FETCH_TOOL = "fetch"


def _known_tools(names: list[str]) -> list[str]:
    unknown = sorted(set(names) - {*SANDBOX_TOOLS, FETCH_TOOL})
    if unknown:
        raise ValueError(f"unknown tool(s) {unknown}; known: {[*SANDBOX_TOOLS, FETCH_TOOL]}")
    return names


_HOST = re.compile(r"(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*")


def _host_patterns(hosts: list[str]) -> list[str]:
    for host in hosts:
        if not _HOST.fullmatch(host):
            raise ValueError(f"fetch host {host!r} must be a lowercase host name, exact "
                             "('docs.python.org') or any subdomain ('*.example.com'); no "
                             "scheme, port or path")
    return hosts


class FetchLimits(Section):
    """``[tools.fetch]``: bounds of one ``fetch`` call."""

    #: bytes of a response's body read at most; past it reading stops
    max_bytes: int = Field(default=2_000_000, ge=1024, le=100_000_000)
    #: seconds for the whole call (the turn's remaining time may cut it shorter)
    timeout: float = Field(default=15.0, gt=0, le=300)
    #: redirects followed, each checked like the first URL
    max_redirects: int = Field(default=5, ge=0, le=20)


def _approvable(names: list[str]) -> list[str]:
    """Sandbox tools, or MCP tools as ``<server>.<tool>`` (registered by the tool host)."""
    # send_file's output is the file's bytes, for the outbox, never shown to a model
    known = [n for n in SANDBOX_TOOLS if n != "send_file"]
    bad = sorted(n for n in names if n not in known and not _mcp_name(n))
    if bad:
        raise ValueError(f"approve: unknown tool(s) {bad}; name a sandbox tool {known} "
                         "or an MCP tool as '<server>.<tool>'")
    return names


def _mcp_name(name: str) -> bool:
    server, sep, tool = name.partition(".")
    return bool(sep and server and tool)


#: tool names, each known
ToolNames = Annotated[list[str], AfterValidator(_known_tools)]
#: ``fetch`` host patterns, each checked
FetchHosts = Annotated[list[str], AfterValidator(_host_patterns)]
#: tools that may wait for an approval, each checked
Approvable = Annotated[list[str], AfterValidator(_approvable)]


class SandboxLimits(Section):
    """Limits of one sandboxed command; the defaults suit small scripts."""

    #: RLIMIT_CPU, seconds of CPU time
    cpu_seconds: int = Field(default=10, ge=1, le=3600)
    #: RLIMIT_AS, MiB of address space per process
    memory_mb: int = Field(default=1024, ge=64, le=65536)
    #: RLIMIT_NPROC: processes of the sandbox's uid at once
    processes: int = Field(default=64, ge=4, le=4096)
    #: RLIMIT_FSIZE, MiB: the largest file a command may write
    file_mb: int = Field(default=64, ge=1, le=65536)
    #: the whole workspace, MiB; over it, writes are refused until files are removed
    workspace_mb: int = Field(default=256, ge=1, le=1_048_576)
    #: the private /tmp (tmpfs), MiB
    tmp_mb: int = Field(default=64, ge=1, le=65536)
    #: bytes of stdout and of stderr kept from one command
    output_bytes: int = Field(default=32_000, ge=256, le=10_000_000)
    #: wall-clock seconds of one call (the drain job's remaining time may cut it shorter)
    timeout: float = Field(default=30.0, gt=0, le=3600)
    #: the largest file ``send_file`` sends, MiB (Telegram's bots take 50 MB at most)
    send_file_mb: int = Field(default=8, ge=1, le=45)


class GroupTools(Section):
    """``[tools.groups."<channel:chat>"]``: one group's overrides (unset: the default)."""

    sandbox: bool | None = None
    network: bool | None = None
    #: tool names this group may use (unset: every tool the group has turned on)
    allow: ToolNames | None = None
    #: extra read-only mounts (host paths), each under one of ``[tools] mount_roots``;
    #: seen inside the sandbox at ``/mnt/<last path component>``
    mounts: list[str] = Field(default_factory=list)
    #: MCP servers and tools this group may use: "server" or "server.tool" (unset: the
    #: default ``[tools] mcp_allow``)
    mcp: list[str] | None = None
    #: hosts ``fetch`` may GET for this group (unset: ``[tools] fetch_hosts``)
    fetch_hosts: FetchHosts | None = None
    #: tools that wait for an admin's /approve here (unset: the default list)
    approve: Approvable | None = None
    approval_timeout: float | None = Field(default=None, gt=0, le=7 * 86400)


class ToolsConfig(Section):
    """``[tools]``: defaults for every group, the sandbox's limits, per-group overrides."""

    sandbox: bool = False
    #: network for sandboxed commands (slirp4netns, host loopback unreachable); off: none
    network: bool = False
    allow: ToolNames = Field(default_factory=lambda: [*SANDBOX_TOOLS, FETCH_TOOL])
    limits: SandboxLimits = SandboxLimits()
    #: hosts ``fetch`` may GET: "docs.python.org" (that host) or "*.example.com" (any
    #: subdomain, not example.com itself); empty: no fetch
    fetch_hosts: FetchHosts = Field(default_factory=list)
    fetch: FetchLimits = FetchLimits()
    #: host uid (and gid) sandboxes run as when the tool host runs as root: the process
    #: limit counts every process of this uid, so it must be one no service or user has
    sandbox_uid: int = Field(default=59999, ge=1, le=2**31)
    #: directories under which group mounts may lie
    mount_roots: list[str] = Field(default_factory=list)
    groups: Annotated[dict[str, GroupTools], group_keyed(
        '[tools.groups."telegram:-100123"]')] = Field(default_factory=dict)
    #: MCP servers the tool host runs (``gateway.config.mcp``)
    mcp: Annotated[dict[str, McpServer], AfterValidator(check_servers)] = \
        Field(default_factory=dict)
    #: MCP servers and tools every group may use ("server" or "server.tool"); none by
    #: default: a server's tools act with its secrets, so an operator opts each group in
    mcp_allow: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _mcp_entries(self) -> ToolsConfig:
        lists = [self.mcp_allow, *(g.mcp or [] for g in self.groups.values())]
        for entry in (e for lst in lists for e in lst):
            if entry.partition(".")[0] not in self.mcp:
                raise ValueError(f"MCP allowlist entry {entry!r} names no [tools.mcp] "
                                 f"server; known: {sorted(self.mcp)}")
        return self

    def mcp_secret_names(self) -> set[str]:
        """The environment variables MCP servers are named to get (the tool host's
        environment carries them; no other process's does)."""
        return {n for server in self.mcp.values() for n in server.env}

    #: tools a call of which waits for an admin's ``/approve <id>`` (dangerous ones)
    approve: Approvable = Field(default_factory=list)
    #: seconds a call waits for ``/approve`` before it is refused (and the chat told)
    approval_timeout: float = Field(default=3600.0, gt=0, le=7 * 86400)

    def for_group(self, group: str) -> GroupPolicy:
        """The resolved policy of ``group``: its override over the defaults."""
        over = self.groups.get(group, GroupTools())
        sandbox = self.sandbox if over.sandbox is None else over.sandbox
        allow = self.allow if over.allow is None else over.allow
        hosts = self.fetch_hosts if over.fetch_hosts is None else over.fetch_hosts
        fetch = frozenset({FETCH_TOOL}) if hosts and FETCH_TOOL in allow else frozenset()
        return GroupPolicy(
            allowed=(frozenset(n for n in allow if n in SANDBOX_TOOLS) if sandbox
                     else frozenset()) | fetch,
            network=self.network if over.network is None else over.network,
            mounts=tuple(over.mounts),
            mcp=frozenset(self.mcp_allow if over.mcp is None else over.mcp),
            fetch_hosts=tuple(hosts),
            approve=frozenset(self.approve if over.approve is None else over.approve),
            approval_timeout=(self.approval_timeout if over.approval_timeout is None
                              else over.approval_timeout),
        )


class GroupPolicy(Section):
    """What one group may use: the tool names, the network, its extra mounts."""

    allowed: frozenset[str]
    network: bool
    mounts: tuple[str, ...]
    #: MCP allowlist entries: "server" or "server.tool" (``gateway.config.mcp.allows``)
    mcp: frozenset[str] = frozenset()
    fetch_hosts: tuple[str, ...] = ()
    #: tools whose calls wait for an admin's ``/approve`` (``gateway.queue.approvals``)
    approve: frozenset[str] = frozenset()
    approval_timeout: float = 3600.0
