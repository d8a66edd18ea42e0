"""``/tasks``: a chat's scheduled tasks, from the chat (``gateway.intake._commands`` table).

``/tasks`` lists them; ``/tasks show|log <name>`` for one; ``/tasks pause|resume|cancel
<name>``: the task's creator, a chat admin, the DM's owner or the operator. Creating
one is the agent's job (ask the bot: "remind us every Monday at 9"), so the schedule is
checked the same way whoever asks.
"""

from __future__ import annotations

from gateway.config import Settings
from gateway.tasks._desk import ACTIONS, TaskDesk

USAGE = ("Usage: /tasks [list] | /tasks show|log|pause|resume|cancel <name>. To create one, "
         "ask me, e.g. \"remind us every Monday at 9 to post the plan\".")


def tasks_command(config: Settings, group: str, args: str, *, by: str,
                  may_any: bool) -> str:
    """The answer to ``/tasks <args>`` from ``by`` (``channel:sender_id``) in ``group``."""
    words = args.split(maxsplit=1)
    action = words[0].lower() if words else "list"
    name = words[1].strip() if len(words) > 1 else ""
    if action not in ACTIONS:
        return USAGE
    desk = TaskDesk(config)
    if action == "list":
        return desk.list(group)
    if action == "show":
        return desk.show(group, name)
    if action == "log":
        return desk.log(group, name)
    return desk.change(group, action, name, by=by, may_any=may_any)
