"""Chat commands: parsed from the normalized message, answered without the model.

A command is recognised from structure, never guessed from prose:

* ``Inbound.command``, set by an adapter from the platform's own command form (a
  Telegram ``bot_command`` entity addressed to this bot, a Slack slash command event);
* otherwise plain text starting with ``/name`` (local console, new channels). A
  ``/name@somebot`` token in plain text is addressed to a bot by name: only the adapter
  knows whether that bot is this one, so the gateway leaves it alone.

Only names in ``COMMANDS`` are commands. Any other ``/word`` in a group stays ordinary
text for the model (``/shrug``, a path, a command meant for another bot in the room); in a
DM, where no other bot listens, an unknown ``/name`` is answered with "unknown command"
and the list. A forwarded message is someone else's words and is never a command,
whatever it says.

Arguments are bounded in one place (``MAX_ARGS_CHARS``, checked before any handler runs):
a longer one gets a clear error, never an answer that grows with the input.

Each command declares who may run it (any one of its roles suffices), where (DM,
group), and whether it needs confirmation: the first call answers what it would do and
asks for ``/<name> confirm``; stateless, so a retried delivery cannot confirm by itself.
Roles are computed from structure: ``operator`` = ``[policy] admins``; ``chat_admin``
= the platform's own admin flag in a group; ``dm_owner`` = the person in a DM;
``member`` = anyone the policy let in.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

from channels.models import Inbound
from gateway.config import Settings
from gateway.intake._identity import IdentityStore
from gateway.operations._usage import parse_usd, usage_summary
from gateway.queue import Budget
from gateway.tasks import tasks_command

if TYPE_CHECKING:  # not at run time: the desk imports gateway.tasks, as this does
    from gateway.intake._approvals import ApprovalDesk


class SenderRole(StrEnum):
    OPERATOR = "operator"
    CHAT_ADMIN = "chat admin"
    DM_OWNER = "DM owner"
    MEMBER = "member"


class ChatKind(StrEnum):
    DM = "DM"
    GROUP = "group"


@dataclass(frozen=True)
class ParsedCommand:
    name: str  # lowercase, without "/" and "@bot"
    args: str


class MemoryServices(Protocol):
    """What ``/memory`` and ``/forget`` may ask of a group's memory
    (``gateway.intake._memorydesk.MemoryDesk``); blocking calls."""

    def view(self, group: str, dm_owner: str | None = None) -> str: ...

    def forget_preview(self, group: str, phrase: str, dm_owner: str | None = None
                       ) -> str: ...

    def forget(self, group: str, phrase: str, by: str, dm_owner: str | None = None
               ) -> str: ...


@dataclass(frozen=True)
class Invocation:
    """One command call with everything a handler may read."""

    msg: Inbound
    command: ParsedCommand
    roles: frozenset[SenderRole]
    config: Settings
    memory: MemoryServices | None = None
    #: the identity links in Redis (the gateway passes it; None: config links only)
    identities: IdentityStore | None = None
    #: spend and caps in Redis, for ``/usage`` (None: not reachable; blocking calls)
    usage: Budget | None = None
    #: ``/approve`` and ``/deny`` (None: not reachable)
    approvals: ApprovalDesk | None = None

    @property
    def where(self) -> ChatKind:
        return ChatKind.GROUP if self.msg.is_group else ChatKind.DM


#: a handler answers at once (``str``; in ``answer``'s thread, so it may block on files
#: and the sync Redis client) or, when it needs the event loop (``/approve``), with a
#: coroutine
Handler = Callable[[Invocation], str | Awaitable[str]]


@dataclass(frozen=True)
class CommandSpec:
    name: str
    summary: str
    who: frozenset[SenderRole]
    where: frozenset[ChatKind]
    confirm: bool
    handler: Handler
    #: answers an unconfirmed call (what would happen, how to confirm) instead of the
    #: generic "needs confirmation"
    preview: Handler | None = None


#: Telegram's limit for a command name (setMyCommands: 1-32 chars, a-z 0-9 _).
_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
CONFIRM_WORD = "confirm"
#: ``/link off``: undo the sender's ``/link`` links
UNLINK_WORD = "off"
#: not commands even in a DM: Telegram sends ``/start`` when a person opens a chat with
#: the bot, a hello for the model rather than an unknown command
GREETINGS = frozenset({"start"})
#: longest argument string any command takes, characters: room for a sentence to
#: ``/forget``, far below what would make a reply or a queued request heavy
MAX_ARGS_CHARS = 300


def parse_command(msg: Inbound) -> ParsedCommand | None:
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
    if not _NAME.fullmatch(name):
        return None
    if name not in COMMANDS and (msg.is_group or name in GREETINGS):
        return None  # in a group maybe meant for another bot; /start a hello: plain text
    return ParsedCommand(name, args)  # a name not in COMMANDS: a DM's unknown command


def roles_of(msg: Inbound, config: Settings) -> frozenset[SenderRole]:
    roles = {SenderRole.MEMBER}
    if msg.sender_key in config.policy.admins:
        roles.add(SenderRole.OPERATOR)
    if msg.is_group and msg.is_admin:
        roles.add(SenderRole.CHAT_ADMIN)
    if not msg.is_group:
        roles.add(SenderRole.DM_OWNER)
    return frozenset(roles)


def permitted(spec: CommandSpec, roles: frozenset[SenderRole], where: ChatKind) -> str | None:
    """None when allowed, else the reason it is not."""
    if where not in spec.where:
        places = " or ".join(sorted(w.value for w in spec.where))
        return f"/{spec.name} works in a {places} only."
    if SenderRole.OPERATOR in roles or roles & spec.who:
        return None
    needed = ", ".join(sorted(r.value for r in spec.who | {SenderRole.OPERATOR}))
    return f"/{spec.name} needs one of: {needed}."


def _dispatch(msg: Inbound, config: Settings, memory: MemoryServices | None,
              identities: IdentityStore | None, usage: Budget | None = None,
              approvals: ApprovalDesk | None = None) -> str | Awaitable[str] | None:
    command = parse_command(msg)
    if command is None:
        return None
    roles = roles_of(msg, config)
    spec = COMMANDS.get(command.name)
    if spec is None:
        return f"Unknown command /{command.name}. " + _listing(roles, ChatKind.DM)
    if len(command.args) > MAX_ARGS_CHARS:
        return (f"/{spec.name}: that is {len(command.args)} characters of arguments; "
                f"commands take at most {MAX_ARGS_CHARS}. Nothing was done.")
    call = Invocation(msg, command, roles, config, memory, identities, usage, approvals)
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


def run_command(msg: Inbound, config: Settings, memory: MemoryServices | None = None
                ) -> str | None:
    """The reply to ``msg`` if it is a command (the model never sees it), else None.
    Blocking when ``memory`` is given (it reads files). Without Redis a command that
    needs it says so (``answer`` is the gateway's call)."""
    reply = _dispatch(msg, config, memory, None)
    if reply is None or isinstance(reply, str):
        return reply
    if inspect.iscoroutine(reply):
        reply.close()
    raise TypeError("a handler returned a coroutine without the gateway's Redis")


async def answer(msg: Inbound, config: Settings, identities: IdentityStore,
                 memory: MemoryServices | None = None, usage: Budget | None = None,
                 approvals: ApprovalDesk | None = None) -> str | None:
    """``run_command`` with Redis: what the gateway calls. The handler runs in a thread
    (``/memory`` and ``/forget`` read the group's files; the identity store and the
    budget are blocking); one that needs the loop hands back a coroutine, awaited here."""
    reply = await asyncio.to_thread(_dispatch, msg, config, memory, identities, usage,
                                    approvals)
    if reply is None or isinstance(reply, str):
        return reply
    return await reply


# ---------------------------------------------------------------------- handlers


def _listing(roles: frozenset[SenderRole], where: ChatKind) -> str:
    lines = [
        f"/{spec.name}: {spec.summary}"
        for spec in COMMANDS.values()
        if permitted(spec, roles, where) is None
    ]
    return "Commands you can use here:\n" + "\n".join(lines)


def _whoami(call: Invocation) -> str:
    msg = call.msg
    roles = ", ".join(sorted(r.value for r in call.roles))
    base = (f"You are {msg.sender_name} ({msg.sender_key}) in {msg.group}; "
            f"your roles here: {roles}.")
    me = msg.sender_key
    if msg.is_group:  # which other accounts a person has is theirs to see, in a DM
        return base
    store = call.identities
    person = call.config.person_of(me) if store is None else store.person_of(me)
    if person is None:
        return base
    members = (list(call.config.identities[person].members) if store is None
               else store.members(person))
    others = [m for m in members if m != me]
    return base + f" Linked identities (person {person}): {', '.join([me, *others])}."


def _link(call: Invocation) -> str:
    store = call.identities
    if store is None:
        return "/link needs the gateway's Redis: nothing was linked."
    confirmed = call.command.args.split()[-1:] == [CONFIRM_WORD]
    code = unconfirmed_args(call.command)
    if code.lower() == UNLINK_WORD:
        if not confirmed:
            return store.unlink_preview(call.msg)
        return store.unlink(call.msg).text
    if code and not confirmed:
        return store.preview(code, call.msg)
    if not code:
        issued = store.issue_code(call.msg)
        return (f"Your link code is {issued} (valid {max(1, store.code_ttl // 60)} "
                f"minutes, once). Send /link {issued} from your DM with me on the other "
                "channel; your DMs there and here then share one personal memory.")
    return store.redeem(code, call.msg).text


_SHARE_USAGE = ("Usage: /share profile on|off: whether group chats you are in may see "
                "your profile (user_profile.md of your personal memory; never your DMs).")


def _share(call: Invocation) -> str:
    store = call.identities
    words = call.command.args.lower().split()
    if len(words) != 2 or words[0] != "profile" or words[1] not in ("on", "off"):
        return _SHARE_USAGE
    if store is None:
        return "/share needs the gateway's Redis: nothing was changed."
    person = store.person_of(call.msg.sender_key)
    if person is None:
        return ("You have no personal memory to share yet: link your accounts first "
                "(/link), or ask the operator to list you in [identities].")
    store.set_share_profile(person, words[1] == "on")
    if words[1] == "on":
        return ("Sharing on: group turns where you take part now see your profile "
                "(user_profile.md of your personal memory), never your DMs.")
    return "Sharing off: group turns no longer see your profile."


def _status(call: Invocation) -> str:
    cfg = call.config
    override = cfg.groups.get(call.msg.group)
    engage = (override.engage if override and override.engage else None) or cfg.engage.default
    rule = "every DM" if not call.msg.is_group else f"engage mode {engage}"
    return (f"Group {call.msg.group}: I answer {rule}. Policy: DMs {cfg.policy.dm}, "
            f"groups {cfg.policy.groups}.")


_NO_MEMORY = "memory is not reachable from here (the gateway's memory desk is off)"


def _dm_owner(msg: Inbound) -> str | None:
    """Whose DM this is (their memory may live in ``persons/<id>/``); None in a group,
    which never sees a person's memory."""
    return None if msg.is_group else msg.sender_key


def _memory(call: Invocation) -> str:
    if call.memory is None:
        return f"/memory is not available: {_NO_MEMORY}."
    return call.memory.view(call.msg.group, _dm_owner(call.msg))


def _forget_preview(call: Invocation) -> str:
    if call.memory is None:
        return f"/forget is not available: {_NO_MEMORY}; nothing was deleted."
    return call.memory.forget_preview(call.msg.group, unconfirmed_args(call.command),
                                      _dm_owner(call.msg))


def _forget(call: Invocation) -> str:
    if call.memory is None:
        return f"/forget is not available: {_NO_MEMORY}; nothing was deleted."
    msg = call.msg
    return call.memory.forget(msg.group, unconfirmed_args(call.command),
                              msg.sender_key, _dm_owner(msg))


_USAGE_CAP = ("Usage: /usage cap day|month <USD>|none|default: this chat's cap (none lifts "
              "it, default goes back to the operator's)")


def _usage(call: Invocation) -> str:
    """The chat's and the sender's spend, caps and what is left; ``cap``: change this
    chat's cap (a chat admin or the operator: a DM's owner may not lift their own)."""
    budget = call.usage
    if budget is None:
        return "/usage needs the gateway's Redis: nothing to show."
    words = call.command.args.lower().split()
    msg = call.msg
    if not words:
        store = call.identities
        person = (store.person_of(msg.sender_key) if store is not None else None)
        return usage_summary(budget, call.config, msg.group, person or msg.sender_key)
    if len(words) != 3 or words[0] != "cap" or words[1] not in ("day", "month"):
        return _USAGE_CAP
    if not call.roles & {SenderRole.OPERATOR, SenderRole.CHAT_ADMIN}:
        return "Not allowed: changing a cap needs a chat admin or the operator."
    period = words[1]
    scope = f"group:{msg.group}"
    if words[2] == "default":
        released = budget.reset_cap(scope, period)
        what = "back to the operator's"
    else:
        try:
            micro = parse_usd(words[2])
        except ValueError:
            return _USAGE_CAP
        released = budget.set_cap(scope, period, micro)
        what = "lifted" if micro is None else f"set to ${micro / 1_000_000:g}"
    return f"This chat's {period} cap is {what}." + (
        " Waiting messages go through now." if released else "")


def _tasks(call: Invocation) -> str:
    msg = call.msg
    return tasks_command(call.config, msg.group, call.command.args, by=msg.sender_key,
                         may_any=bool(call.roles & {SenderRole.OPERATOR, *_OWNERS}))


def _decide(approve: bool) -> Handler:
    """``/approve <id>`` or ``/deny <id>``: a call waiting for approval
    (gateway.intake._approvals)."""
    def handler(call: Invocation) -> str | Awaitable[str]:
        if call.approvals is None:
            return "Approvals need the gateway's Redis: nothing was decided."
        return call.approvals.decide(call.msg, call.command.args, approve=approve)
    return handler


_ANY = frozenset({ChatKind.DM, ChatKind.GROUP})
_OWNERS = frozenset({SenderRole.CHAT_ADMIN, SenderRole.DM_OWNER})

#: The command table. Operators may run everything, everywhere it applies.
COMMANDS: dict[str, CommandSpec] = {
    spec.name: spec
    for spec in (
        CommandSpec("help", "list the commands you can use here",
                    frozenset({SenderRole.MEMBER}), _ANY, False,
                    lambda call: _listing(call.roles, call.where)),
        CommandSpec("whoami", "who the bot thinks you are, and your roles here",
                    frozenset({SenderRole.MEMBER}), _ANY, False, _whoami),
        CommandSpec("status", "how this chat is set up", frozenset({SenderRole.MEMBER}), _ANY,
                    False, _status),
        CommandSpec("memory", "show what the bot remembers about this chat, with sources",
                    frozenset({SenderRole.MEMBER}), _ANY, False, _memory),
        CommandSpec("forget", "remove words from this chat's memory: /forget <words>",
                    _OWNERS, _ANY, True, _forget, preview=_forget_preview),
        CommandSpec("link", "link your identity on another channel to this one "
                    "(/link off: undo it)",
                    frozenset({SenderRole.DM_OWNER}), frozenset({ChatKind.DM}), False, _link),
        CommandSpec("share", "let group chats see your profile: /share profile on|off",
                    frozenset({SenderRole.DM_OWNER}), frozenset({ChatKind.DM}), False, _share),
        CommandSpec("usage", "model spend and caps here (/usage cap day|month <USD>|none"
                    "|default: this chat's cap, admins)",
                    _OWNERS, _ANY, False, _usage),
        CommandSpec("tasks", "scheduled tasks of this chat: /tasks [show|log|pause|resume|"
                    "cancel <name>]", frozenset({SenderRole.MEMBER}), _ANY, False, _tasks),
        CommandSpec("approve", "run a tool call waiting for approval: /approve <id>",
                    frozenset({SenderRole.CHAT_ADMIN}), _ANY, False, _decide(True)),
        CommandSpec("deny", "refuse a tool call waiting for approval: /deny <id>",
                    frozenset({SenderRole.CHAT_ADMIN}), _ANY, False, _decide(False)),
    )
}


def registry_entries() -> list[tuple[str, str]]:
    """(name, description) pairs for platform command registries (Telegram
    ``setMyCommands``, the Slack manifest's ``slash_commands``)."""
    return [(spec.name, spec.summary) for spec in COMMANDS.values()]
