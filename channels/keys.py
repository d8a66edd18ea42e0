"""Redis key names of the message path, all under one prefix (default ``pnc:``).

The queue layout is part of the envelope's contract: the gateway writes these keys and
the workers read them, so it lives here, beside ``channels.models``, where both may
import it (pure names, no platform SDK).
"""

from __future__ import annotations

from dataclasses import dataclass

#: RQ queue drain jobs are enqueued on, unless ``[queue] name`` says otherwise
DEFAULT_QUEUE = "pnc-drain"
#: import path of the drain job, as RQ resolves it inside a worker
DRAIN_JOB = "workers.drain.drain_group"
#: consumer group of gateways reading the outbox stream
OUTBOX_GROUP = "gateway"


@dataclass(frozen=True)
class Keys:
    prefix: str = "pnc:"

    def mailbox(self, group: str) -> str:
        """List of engaged messages waiting for a turn."""
        return f"{self.prefix}mailbox:{group}"

    def context(self, group: str) -> str:
        """List of unengaged group messages kept for the next turn."""
        return f"{self.prefix}context:{group}"

    def processing(self, group: str) -> str:
        """List: the batch the current (or a crashed) turn works on."""
        return f"{self.prefix}processing:{group}"

    def seq(self, group: str) -> str:
        """Counter giving each of a group's messages its arrival order."""
        return f"{self.prefix}seq:{group}"

    def dedupe(self, dedupe_id: str) -> str:
        return f"{self.prefix}dedupe:{dedupe_id}"

    def status(self, dedupe_id: str) -> str:
        """What the inbox did with a message (local channel clients read it)."""
        return f"{self.prefix}status:{dedupe_id}"

    def lease(self, group: str) -> str:
        """Present while a drain job for the group is queued or running."""
        return f"{self.prefix}drain:{group}"

    def lock(self, group: str) -> str:
        """Held by the one worker running a turn for the group."""
        return f"{self.prefix}lock:{group}"

    @property
    def active(self) -> str:
        """Set of groups with a mailbox or processing batch (what the sweeper checks)."""
        return f"{self.prefix}active"

    def turn(self, turn_id: str) -> str:
        """Hash of one turn's progress: attempts, published, reply, written."""
        return f"{self.prefix}turn:{turn_id}"

    def dead(self, group: str) -> str:
        """Batches that failed ``max_attempts`` times, kept for an operator."""
        return f"{self.prefix}dead:{group}"

    @property
    def outbox(self) -> str:
        return f"{self.prefix}outbox"

    def sent(self, reply_id: str, index: int) -> str:
        return f"{self.prefix}sent:{reply_id}:{index}"

    def cursor(self, channel: str, account: str, name: str) -> str:
        return f"{self.prefix}cursor:{channel}:{account}:{name}"

    def rate(self, channel: str, chat_id: str) -> str:
        return f"{self.prefix}rl:{channel}:{chat_id}"

    @property
    def gateway_alive(self) -> str:
        return f"{self.prefix}gateway:alive"
