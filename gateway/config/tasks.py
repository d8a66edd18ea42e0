"""``[tasks]``: scheduled tasks (issue 27): limits, the default time zone, catch-up.

The operator's limits on what a chat may schedule (``min_interval``, ``max_per_group``),
the time zone a task runs in when neither its creator nor the group named one
(``timezone``; ``[tasks.zones]`` names a group's), and how the gateway's scheduler
behaves after downtime (``grace``: a run later than this is missed, and its task's
catch-up policy decides; ``catchup_max``: most runs ``catchup = "all"`` replays) and after
failures (``pause_after``: consecutive failed runs that pause a task).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from gateway.config.base import Section, ZoneName, group_keyed


class TasksConfig(Section):

    #: whether the gateway runs the scheduler at all (the task files stay either way)
    enabled: bool = True
    #: shortest interval between two runs of one task, seconds (cron: its two first runs)
    min_interval: float = Field(default=300.0, gt=0)
    #: most tasks one chat may have (active and paused; done and cancelled do not count)
    max_per_group: int = Field(default=20, ge=0, le=1000)
    #: the operator's time zone, the default of every group's
    timezone: ZoneName = "UTC"
    #: a group's own default time zone: ``[tasks.zones] "telegram:-100" = "Europe/Rome"``
    zones: Annotated[dict[str, ZoneName], group_keyed(
        '[tasks.zones] "telegram:-100123" = "Europe/Rome"')] = Field(default_factory=dict)
    #: a run this many seconds late counts as missed (its task's catch-up policy decides)
    grace: float = Field(default=60.0, gt=0)
    #: most missed runs ``catchup = "all"`` fires after downtime
    catchup_max: int = Field(default=10, ge=1, le=1000)
    #: consecutive failed runs after which a task is paused and its chat told
    pause_after: int = Field(default=3, ge=1, le=100)
    #: how often the scheduler looks for due runs, seconds
    tick: float = Field(default=1.0, gt=0, le=60)
    #: how often it re-reads every group's task files (new, resumed or edited by hand,
    #: and the sorted set after a Redis loss), seconds
    rescan: float = Field(default=30.0, gt=0)

    def zone_of(self, group: str) -> str:
        """The default time zone of ``group``'s tasks: the group's, else the operator's."""
        return self.zones.get(group, self.timezone)
