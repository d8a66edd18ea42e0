"""Chat commands: parsed from the normalized message, answered without the model.

A command is recognised from structure, never guessed from prose:

* ``Inbound.command``, set by an adapter from the platform's own command form (a
  Telegram ``bot_command`` entity addressed to this bot, a Slack slash command event);
* otherwise plain text starting with ``/name`` (local console, new channels). A
  ``/name@somebot`` token in plain text is addressed to a bot by name: only the adapter
  knows whether that bot is this one, so the gateway leaves it alone.

Only names in ``COMMANDS`` are commands; any other ``/word`` stays ordinary text for
the model (``/shrug``, a path). A forwarded message is someone else's words and is never
a command, whatever it says.

Each command declares who may run it (any one of its roles suffices), where (DM,
group), and whether it needs confirmation: the first call answers what it would do and
asks for ``/<name> confirm``; stateless, so a retried delivery cannot confirm by itself.
Roles are computed from structure: ``operator`` = ``[policy] admins``; ``chat_admin``
= the platform's own admin flag in a group; ``dm_owner`` = the person in a DM;
``member`` = anyone the policy let in.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from channels.models import Inbound
from gateway.config import GatewayConfig


class Role(StrEnum):
    OPERATOR = "operator"
    CHAT_ADMIN = "chat admin"
    DM_OWNER = "DM owner"
    MEMBER = "member"


class Where(StrEnum):
    DM = "DM"
    GROUP = "group"


@dataclass(frozen=True)
class ParsedCommand:
    name: str  # lowercase, without "/" and "@bot"
    args: str


class MemoryServices(Protocol):
    """What ``/memory`` and ``/forget`` may ask of a group's memory
    (``gateway.memorydesk.MemoryDesk``); blocking calls."""

    def view(self, group: str) -> str: ...

    def forget_preview(self, group: str, phrase: str) -> str: ...

    def forget(self, group: str, phrase: str, by: str) -> str: ...


@dataclass(frozen=True)
class Invocation:
    """One command call with everything a handler may read."""

    msg: Inbound
    command: ParsedCommand
    roles: frozenset[Role]
    config: GatewayConfig
    memory: MemoryServices | None = None

    @property
    def where(self) -> Where:
        return Where.GROUP if self.msg.is_group else Where.DM


Handler = Callable[[Invocation], str]


@dataclass(frozen=True)
class CommandSpec:
    name: str
    summary: str
    who: frozenset[Role]
    where: frozenset[Where]
    confirm: bool
    handler: Handler
    #: answers an unconfirmed call (what would happen, how to confirm) instead of the
    #: generic "needs confirmation"
    preview: Handler | None = None


#: Telegram's limit for a command name (setMyCommands: 1-32 chars, a-z 0-9 _).
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
CONFIRM_WORD = "confirm"


def parse(msg: Inbound) -> ParsedCommand | None:
    """The command ``msg`` gives the bot, or None (not a command: ordinary text)."""
    if msg.kind != "message" or msg.forwarded_from is not None:
        return None
    text = msg.text.strip()
    parts = text.split(maxsplit=1)
    args = parts[1].strip() if len(parts) == 2 else ""
    if msg.command is not None:
        name = msg.command.lower()
    elif text.startswith("/") and parts:
        name = parts[0][1:].lower()
        if "@" in name:
            return None  # addressed to a named bot: the adapter would have said if us
    else:
        return None
    if not _NAME.fullmatch(name) or name not in COMMANDS:
        return None
    return ParsedCommand(name, args)


def roles_of(msg: Inbound, config: GatewayConfig) -> frozenset[Role]:
    roles = {Role.MEMBER}
    if f"{msg.channel}:{msg.sender_id}" in config.policy.admins:
        roles.add(Role.OPERATOR)
    if msg.is_group and msg.is_admin:
        roles.add(Role.CHAT_ADMIN)
    if not msg.is_group:
        roles.add(Role.DM_OWNER)
    return frozenset(roles)


def permitted(spec: CommandSpec, roles: frozenset[Role], where: Where) -> str | None:
    """None when allowed, else the reason it is not."""
    if where not in spec.where:
        places = " or ".join(sorted(w.value for w in spec.where))
        return f"/{spec.name} works in a {places} only."
    if Role.OPERATOR in roles or roles & spec.who:
        return None
    needed = ", ".join(sorted(r.value for r in spec.who | {Role.OPERATOR}))
    return f"/{spec.name} needs one of: {needed}."


def run(msg: Inbound, config: GatewayConfig, memory: MemoryServices | None = None
        ) -> str | None:
    """The reply to ``msg`` if it is a command (the model never sees it), else None.
    Blocking when ``memory`` is given (it reads files): call it from a thread."""
    command = parse(msg)
    if command is None:
        return None
    spec = COMMANDS[command.name]
    call = Invocation(msg, command, roles_of(msg, config), config, memory)
    refusal = permitted(spec, call.roles, call.where)
    if refusal is not None:
        return f"Not allowed: {refusal}"
    if spec.confirm and command.args.split()[-1:] != [CONFIRM_WORD]:
        if spec.preview is not None:
            return spec.preview(call)
        return (f"/{spec.name}: {spec.summary}. This needs confirmation: send "
                f"/{spec.name} {(command.args + ' ').lstrip()}{CONFIRM_WORD}")
    return spec.handler(call)


def unconfirmed_args(command: ParsedCommand) -> str:
    """The arguments without a trailing ``confirm``."""
    words = command.args.split()
    return " ".join(words[:-1] if words[-1:] == [CONFIRM_WORD] else words)


# ---------------------------------------------------------------------- handlers


def _not_yet(what: str) -> Handler:
    def handler(call: Invocation) -> str:
        return f"/{call.command.name} is not available yet: {what}."

    return handler


def _help(call: Invocation) -> str:
    lines = [
        f"/{spec.name}: {spec.summary}"
        for spec in COMMANDS.values()
        if permitted(spec, call.roles, call.where) is None
    ]
    return "Commands you can use here:\n" + "\n".join(lines)


def _whoami(call: Invocation) -> str:
    msg = call.msg
    roles = ", ".join(sorted(r.value for r in call.roles))
    return (f"You are {msg.sender_name} ({msg.channel}:{msg.sender_id}) in {msg.group}; "
            f"your roles here: {roles}.")


def _status(call: Invocation) -> str:
    cfg = call.config
    override = cfg.groups.get(call.msg.group)
    engage = (override.engage if override and override.engage else None) or cfg.engage.default
    rule = "every DM" if not call.msg.is_group else f"engage mode {engage}"
    return (f"Group {call.msg.group}: I answer {rule}. Policy: DMs {cfg.policy.dm}, "
            f"groups {cfg.policy.groups}.")


_NO_MEMORY = "memory is not reachable from here (the gateway's memory desk is off)"


def _memory(call: Invocation) -> str:
    if call.memory is None:
        return f"/memory is not available: {_NO_MEMORY}."
    return call.memory.view(call.msg.group)


def _forget_preview(call: Invocation) -> str:
    if call.memory is None:
        return f"/forget is not available: {_NO_MEMORY}; nothing was deleted."
    return call.memory.forget_preview(call.msg.group, unconfirmed_args(call.command))


def _forget(call: Invocation) -> str:
    if call.memory is None:
        return f"/forget is not available: {_NO_MEMORY}; nothing was deleted."
    msg = call.msg
    return call.memory.forget(msg.group, unconfirmed_args(call.command),
                              f"{msg.channel}:{msg.sender_id}")


_ANY = frozenset({Where.DM, Where.GROUP})
_OWNERS = frozenset({Role.CHAT_ADMIN, Role.DM_OWNER})

#: The command table. Operators may run everything, everywhere it applies.
COMMANDS: dict[str, CommandSpec] = {
    spec.name: spec
    for spec in (
        CommandSpec("help", "list the commands you can use here",
                    frozenset({Role.MEMBER}), _ANY, False, _help),
        CommandSpec("whoami", "who the bot thinks you are, and your roles here",
                    frozenset({Role.MEMBER}), _ANY, False, _whoami),
        CommandSpec("status", "how this chat is set up", frozenset({Role.MEMBER}), _ANY,
                    False, _status),
        CommandSpec("memory", "show what the bot remembers about this chat, with sources",
                    frozenset({Role.MEMBER}), _ANY, False, _memory),
        CommandSpec("forget", "remove words from this chat's memory: /forget <words>",
                    _OWNERS, _ANY, True, _forget, preview=_forget_preview),
        CommandSpec("link", "link your identity on another channel to this one",
                    frozenset({Role.DM_OWNER}), frozenset({Where.DM}), True,
                    _not_yet("cross-channel identities are not built")),
        CommandSpec("share", "share this chat's memory with another chat",
                    frozenset({Role.CHAT_ADMIN}), frozenset({Where.GROUP}), True,
                    _not_yet("memory sharing between chats is not built")),
        CommandSpec("usage", "model usage and cost for this chat",
                    _OWNERS, _ANY, False,
                    _not_yet("usage is not metered yet")),
        CommandSpec("tasks", "scheduled tasks of this chat", frozenset({Role.MEMBER}), _ANY,
                    False, _not_yet("scheduled tasks are not built")),
    )
}


def registry_entries() -> list[tuple[str, str]]:
    """(name, description) pairs for platform command registries (Telegram
    ``setMyCommands``, the Slack manifest's ``slash_commands``)."""
    return [(spec.name, spec.summary) for spec in COMMANDS.values()]
