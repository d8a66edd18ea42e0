"""The queue: the contract between the gateway and the workers, in one place.

It owns the Redis key layout (``keys``), every Lua script (``lua/*.lua``, read once) with
its typed wrappers (``scripts``: ``GatewayQueue`` for the gateway, ``GroupQueue`` and
``LockOps`` for workers) and the one way jobs are enqueued (``jobs``). It imports redis
and rq only: no platform SDK, no other gateway module, nothing of ``workers`` (jobs are
named by import path).

The life of one group (``g``), and which script moves what::

      inbound message (gateway, push.lua: dedupe:{id} SET NX, seq:{g} INCR)
        │ not engaged                          │ engaged
        ▼                                      ▼
    context:{g} ──────────────┐           mailbox:{g}  + active ∋ g
    (kept for the next turn)  │                │ lease drain:{g} SET NX  ─▶ enqueue_drain()
                              │                │   (sweep.lua re-takes an expired lease:
                              │                │    a killed worker's group is re-enqueued)
                              ▼                ▼
              take.lua (drain job): lock:{g} SET NX (+ lease extended),
                       context + mailbox ──▶ processing:{g}   (all of it, in seq order)
                                               │ turn_begin.lua: turn:{id}.attempts += 1,
                                               │   typing event ─▶ outbox
                                               │ attempts > max_attempts ─▶ dead:{g}
                                               │   (+ deadlog:{g}: turn, when, why; an
                                               │    attempt >= 2 is noted in retrying)
                                               ▼
              turn_publish.lua (only while lock:{g} is ours): reply + done ─▶ outbox,
                       turn:{id}.published (a retried turn never publishes twice)
                                               │ episode file written
                                               ▼
              finish.lua: turn:{id}.written, episodes:{g} += 1, DEL processing:{g},
                       (extraction on) the batch ─▶ extractq:{g} for the extract job;
                       mailbox empty?  yes: DEL drain:{g}, lock:{g}, SREM active g
                                       no:  next turn (take.lua) on the same job
      outbox (stream, consumer group "gateway") ─▶ gateway sends, XACK + XDEL,
              sent:{reply}:{i} per chunk, gcra.lua paces each chat (rl:{channel}:{chat})
              outcome.lua: outcome:{reply} (each chunk delivered <platform id> | failed
              <reason>, also reported late by an adapter), undelivered:{g} (read by the
              next turn's prompt, cleared when a later reply is delivered),
              delivery:counts (for /healthz)
      edit / deletion (gateway, amend.lua): the entry still waiting in mailbox:{g} or
              context:{g} is replaced / removed; else the change goes to changes:{g}
              (for the memory layer); never a turn of its own; a recorded change
              enqueues the redaction job (enqueue_group_job), as does /forget
              (forget:{g}); it takes lock:{g} like a consolidation (redact:{g} as
              its lease), scrub.lua takes the words out of
              context/mailbox/processing/dead, restream.lua rebuilds the outbox and
              the local reply streams without them, it rewrites memory, then LREMs
              what it applied

      model request (worker, gateway.queue.budget): budget_reserve.lua adds its estimate
              to budget:{scope}:{period} ``reserved`` (global, group, person; day, month)
              of each counter that has a cap (budget:caps at run time, else the
              config's) if every such cap still holds; budget_settle.lua then takes it
              back and adds the real cost to every counter's ``spent`` (usage:{day}
              logs the call). Refused: budget_park.lua (under lock:{g}) puts processing
              back into mailbox:{g}, active ∌ g, budget:parked ∋ g, the notice once per
              period (budget:told:{g}:{period}); a cap change runs budget_unpark.lua:
              parked ─▶ active, and the sweeper enqueues the drain job again

Terms, one meaning each: the *lease* (``drain:{g}``, holds a job id) says a drain job is
queued or running; the *lock* (``lock:{g}``, holds a random token, renewed with the
lease by ``lock_renew.lua``) says one worker runs the group now; *consolidating*
(``consolidate:{g}``) says a consolidation job is queued or running, *extracting*
(``extracting:{g}``) the same of an extraction job. Both take the same lock, so they
never overlap a turn of their group. A linked person's DMs are different groups sharing
one directory: a turn or job of one of them that uses it also takes the person's lock
(``lock:person:{id}``, no lease, the key the person's consolidation takes as its group
lock), always after its group's lock.
"""

from __future__ import annotations

from gateway.queue import events
from gateway.queue.budget import Budget, Counter, Reservation, Spent, counters, period_ids
from gateway.queue.dead import DeadLetters, DeadRecord
from gateway.queue.events import MalformedEvent, OutboxEvent, as_str, read_event
from gateway.queue.jobs import (
    CONSOLIDATE_JOB,
    DEFAULT_QUEUE,
    DRAIN_JOB,
    EXTRACT_JOB,
    REDACT_JOB,
    DrainOptions,
    background_queue,
    enqueue_drain,
    enqueue_group_job,
    job_queue,
    worker_queues,
)
from gateway.queue.keys import OUTBOX_GROUP, Keys
from gateway.queue.refusal import refused_write
from gateway.queue.scripts import (
    BEHIND_HOLD,
    DUPLICATE,
    KEPT_ENQUEUE,
    LOCK_BUSY,
    LOCK_LOST,
    TURN_STATE_TTL,
    Entry,
    GatewayQueue,
    GroupQueue,
    LockOps,
    TurnRecord,
    encode_entry,
    parse_entry,
)
from gateway.queue.transcribe import enqueue_transcribe, transcribe_queue

__all__ = [
    "BEHIND_HOLD",
    "CONSOLIDATE_JOB",
    "DEFAULT_QUEUE",
    "DRAIN_JOB",
    "DUPLICATE",
    "EXTRACT_JOB",
    "KEPT_ENQUEUE",
    "LOCK_BUSY",
    "LOCK_LOST",
    "OUTBOX_GROUP",
    "REDACT_JOB",
    "TURN_STATE_TTL",
    "Budget",
    "Counter",
    "DeadLetters",
    "DeadRecord",
    "DrainOptions",
    "Entry",
    "GatewayQueue",
    "GroupQueue",
    "Keys",
    "LockOps",
    "MalformedEvent",
    "OutboxEvent",
    "Reservation",
    "Spent",
    "TurnRecord",
    "as_str",
    "background_queue",
    "counters",
    "encode_entry",
    "enqueue_drain",
    "enqueue_group_job",
    "enqueue_transcribe",
    "events",
    "job_queue",
    "parse_entry",
    "period_ids",
    "read_event",
    "refused_write",
    "transcribe_queue",
    "worker_queues",
]
