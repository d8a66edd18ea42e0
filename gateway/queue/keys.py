"""Redis key names of the message path, all under one prefix (default ``pnc:``).

Words used for one thing each: the *lease* (``drain:{group}``) says a drain job for the
group is queued or running; the *lock* (``lock:{group}``) is held by the one worker
running a turn (or a consolidation) of the group; *consolidating* says a consolidation
job of the group is queued or running.
"""

from __future__ import annotations

from dataclasses import dataclass

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
        """Present for ``dedupe_ttl`` after a platform message was accepted."""
        return f"{self.prefix}dedupe:{dedupe_id}"

    def lease(self, group: str) -> str:
        """Present while a drain job for the group is queued or running; holds its id."""
        return f"{self.prefix}drain:{group}"

    def lock(self, group: str) -> str:
        """Held (a random token) by the one worker running a turn for the group."""
        return f"{self.prefix}lock:{group}"

    def person_lock(self, memory: str) -> str:
        """Held by the one worker using a linked person's directory (``memory`` is its
        key, ``person:<id>``): a turn or background job of one of their DMs takes it
        after that DM's group lock (always group, then person), so the person's DMs never
        write ``persons/<id>/`` at once. The same key as ``lock(memory)``, which the
        person's own consolidation takes."""
        return self.lock(memory)

    def person_memories(self, group: str) -> str:
        """Set of the linked persons' memory keys (``person:<id>``) that turns of the DM
        ``group`` wrote to: a deletion, edit or ``/forget`` in that DM reaches them too
        (matching its message ids only in what that DM wrote there). Kept after ``/link
        off``: what the DM wrote while linked is still there."""
        return f"{self.prefix}personmem:{group}"

    @property
    def schema(self) -> str:
        """The version of everything under the prefix (``gateway/queue/version.py``)."""
        return f"{self.prefix}schema"

    @property
    def active(self) -> str:
        """Set of groups with a mailbox or processing batch (what the sweeper checks)."""
        return f"{self.prefix}active"

    def turn(self, turn_id: str) -> str:
        """Hash of one turn's progress (fields: see ``gateway.queue.turns``)."""
        return f"{self.prefix}turn:{turn_id}"

    def tool_runs(self, turn_id: str) -> str:
        """The results of a turn's tool calls with effects, for its retries
        (``gateway/queue/toolonce.py``): a hash, one field per call."""
        return f"{self.prefix}tools:once:{turn_id}"

    def dead(self, group: str) -> str:
        """Batches that failed ``max_attempts`` times, kept for an operator."""
        return f"{self.prefix}dead:{group}"

    def dead_log(self, group: str) -> str:
        """List of JSON records, one per dead-lettered batch: turn id, when, why."""
        return f"{self.prefix}deadlog:{group}"

    @property
    def retrying(self) -> str:
        """Hash: group -> JSON of its turn being retried (attempt 2 or later) now; a
        turn that keeps coming back here is a crash loop (``gateway.queue.dead``)."""
        return f"{self.prefix}retrying"

    @property
    def outbox(self) -> str:
        """Stream of typing/reply/done events, read by the gateways' consumer group."""
        return f"{self.prefix}outbox"

    def sent(self, reply_id: str, index: int) -> str:
        """Set once chunk ``index`` of a reply was accepted by the platform."""
        return f"{self.prefix}sent:{reply_id}:{index}"

    def cursor(self, channel: str, account: str, name: str) -> str:
        """A channel's poll position (Telegram offset, Discord last message id...)."""
        return f"{self.prefix}cursor:{channel}:{account}:{name}"

    def rate(self, channel: str, chat_id: str) -> str:
        """GCRA bucket of one chat's sends."""
        return f"{self.prefix}rl:{channel}:{chat_id}"

    @property
    def gateway_alive(self) -> str:
        return f"{self.prefix}gateway:alive"

    def consolidating(self, group: str) -> str:
        """Present while a consolidation of the group is queued, rescheduled or running."""
        return f"{self.prefix}consolidate:{group}"

    def extracting(self, group: str) -> str:
        """Present while an extraction job of the group is queued, rescheduled or running."""
        return f"{self.prefix}extracting:{group}"

    def extractions(self, group: str) -> str:
        """List of turns whose facts are still to be extracted (JSON: turn id, entries)."""
        return f"{self.prefix}extractq:{group}"

    def extraction(self, turn_id: str) -> str:
        """Hash of one turn's extraction: ``result`` (the model's facts, JSON, stored
        before anything is written), ``attempts``, ``done``."""
        return f"{self.prefix}extract:{turn_id}"

    def episodes(self, group: str) -> str:
        """Episodes written for the group since its last consolidation."""
        return f"{self.prefix}episodes:{group}"

    def outcome(self, reply_id: str) -> str:
        """Hash: each chunk's delivery outcome ("delivered <platform id>" or
        "failed <reason>") by chunk index."""
        return f"{self.prefix}outcome:{reply_id}"

    def undelivered(self, group: str) -> str:
        """Hash (reply_id, reason, at): the group's newest reply that failed for good,
        until a later reply is delivered; the next turn's prompt mentions it."""
        return f"{self.prefix}undelivered:{group}"

    @property
    def delivery_counts(self) -> str:
        """Hash ``{channel}:delivered|failed|ambiguous`` -> count, for ``/healthz``
        (``ambiguous``: sends that failed after they may have reached the platform)."""
        return f"{self.prefix}delivery:counts"

    def changes(self, group: str) -> str:
        """List of edits/deletions of messages already taken by a turn (JSON each),
        for the memory layer: the redaction job consumes them."""
        return f"{self.prefix}changes:{group}"

    def forget(self, group: str) -> str:
        """List of ``/forget`` requests (JSON each: id, phrase, by, at) waiting for the
        redaction job, which removes each once applied."""
        return f"{self.prefix}forget:{group}"

    def redacting(self, group: str) -> str:
        """Present while a redaction job of the group runs or is rescheduled (the lease
        its lock renews, as ``consolidating`` is for a consolidation)."""
        return f"{self.prefix}redact:{group}"

    @property
    def identity_links(self) -> str:
        """Hash ``channel:sender_id`` -> person id: accounts linked by ``/link`` (the
        config's ``[identities]`` are not stored here; they always win)."""
        return f"{self.prefix}identity:links"

    def link_code(self, code: str) -> str:
        """A ``/link`` one-time code (JSON: the account that asked, its name), with a TTL;
        taken with GETDEL, so it is used at most once."""
        return f"{self.prefix}identity:code:{code}"

    def link_pending(self, user: str) -> str:
        """The account's live ``/link`` code (one at a time), same TTL."""
        return f"{self.prefix}identity:pending:{user}"

    @property
    def identity_share(self) -> str:
        """Hash person id -> what the person shares with group turns (``profile``);
        absent: nothing (the default)."""
        return f"{self.prefix}identity:share"

    def budget(self, scope: str, period: str) -> str:
        """Hash ``spent``/``reserved`` (micro-USD) of one scope (``global``,
        ``group:{g}``, ``person:{p}``) in one period (``d2026-12-03``, ``m2026-12``)."""
        return f"{self.prefix}budget:{scope}:{period}"

    @property
    def budget_caps(self) -> str:
        """Hash ``{scope}:{day|month}`` -> micro-USD or ``none``: caps set at run time
        (``/usage cap``, ``pynanoclaw usage cap``); they win over the config's."""
        return f"{self.prefix}budget:caps"

    @property
    def budget_parked(self) -> str:
        """Set of groups whose turn stopped at a cap, messages kept in their mailbox;
        a cap change puts them back in ``active`` (the sweeper then drains them)."""
        return f"{self.prefix}budget:parked"

    def budget_told(self, group: str, period: str) -> str:
        """Present once the group was told its budget is spent in ``period``."""
        return f"{self.prefix}budget:told:{group}:{period}"

    @property
    def budget_soft(self) -> str:
        """Hash ``{scope}:{period}`` -> when its soft budget was crossed (told once)."""
        return f"{self.prefix}budget:soft"

    def usage_log(self, day: str) -> str:
        """Hash of one day's metered calls: ``kind\tgroup\tperson\tmetric`` -> count
        (metrics: cost micro-USD, in, out, cached tokens, req, est requests)."""
        return f"{self.prefix}usage:{day}"

    def media_hold(self, group: str) -> str:
        """List of the group's messages held until their attachments are downloaded
        (``gateway.queue.media``), and of any message that arrived behind them."""
        return f"{self.prefix}mediahold:{group}"

    @property
    def media_groups(self) -> str:
        """Set of groups with a non-empty ``media_hold`` list."""
        return f"{self.prefix}mediagroups"

    def media_deleted(self, group: str) -> str:
        """Set of ``<account>:<message id>`` deleted on their platform while held: the
        media job drops them instead of letting them on."""
        return f"{self.prefix}mediadeleted:{group}"
