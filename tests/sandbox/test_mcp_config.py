"""``[tools.mcp.<name>]``: secrets are named, never written; allowlists name servers; the
tool host's environment gets the named variables and no other process's does."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from gateway.config import ConfigError, parse_config
from gateway.config.tools import ToolsConfig
from gateway.operations import worker_env
from gateway.toolhost.process import tools_env, wanted
from gateway.toolhost.status import mcp_note

SERVER = {"command": "mcp-crm", "env": ["CRM_TOKEN"]}


def tools(**raw: Any) -> ToolsConfig:
    return ToolsConfig.model_validate(raw)


def test_a_server_is_a_command_or_a_url_and_its_secrets_are_names() -> None:
    with pytest.raises(ValidationError, match="either command"):
        tools(mcp={"crm": {"command": "x", "url": "http://h/mcp"}})
    with pytest.raises(ConfigError) as err:  # a value pasted where a name goes
        parse_config({"tools": {"mcp": {"crm": {"command": "x", "env": ["sk-live-abc1!"]}}}})
    assert "not names" in str(err.value) and "sk-live-abc1" not in str(err.value)
    with pytest.raises(ValidationError, match="not named in env"):
        tools(mcp={"crm": {"url": "http://h/mcp", "headers": {"Authorization":
                                                              "Bearer ${CRM_TOKEN}"}}})
    with pytest.raises(ValidationError, match="letters, digits"):
        tools(mcp={"c.rm": SERVER})
    with pytest.raises(ConfigError) as err:  # an acronym keeps its capitals
        parse_config({"tools": {"mcp": {"c.rm": SERVER}}})
    assert str(err.value).startswith("tools.mcp: MCP server name 'c.rm': "), err.value


def test_group_allowlists_name_configured_servers_and_default_to_none() -> None:
    with pytest.raises(ValidationError, match="names no"):
        tools(mcp={"crm": SERVER}, groups={"local:ada": {"mcp": ["other.tool"]}})
    cfg = tools(mcp={"crm": SERVER}, mcp_allow=["crm.search"],
                groups={"local:ada": {"mcp": ["crm"]}, "local:bob": {"mcp": []}})
    assert cfg.for_group("local:ada").mcp == {"crm"}
    assert cfg.for_group("local:bob").mcp == frozenset()
    assert cfg.for_group("local:eve").mcp == {"crm.search"}
    assert tools(mcp={"crm": SERVER}).for_group("local:eve").mcp == frozenset()


def test_only_the_tool_host_gets_the_named_secrets() -> None:
    settings = parse_config({"tools": {"mcp": {"crm": SERVER}},
                             "worker": {"pass_env": ["OTHER_KEY"]}})
    assert wanted(settings)
    environ = {"PATH": "/bin", "CRM_TOKEN": "crm-secret", "OTHER_KEY": "other-secret",
               "UNNAMED": "x"}
    env = tools_env(settings, environ, "redis://127.0.0.1:1")
    assert env["CRM_TOKEN"] == "crm-secret"
    assert "OTHER_KEY" not in env and "UNNAMED" not in env
    assert "CRM_TOKEN" not in worker_env(settings, environ, "redis://127.0.0.1:1")


def test_status_counts_the_mcp_tools_and_names_a_server_down() -> None:
    settings = parse_config({"tools": {"mcp": {"crm": SERVER, "wiki": SERVER}}})
    status = {"sandbox": None, "mcp": [{"server": "crm", "name": "crm.search"}]}
    assert mcp_note(status, settings) == "; MCP: 1 tool(s), down: wiki"
    assert mcp_note({"sandbox": None}, parse_config({})) == ""
