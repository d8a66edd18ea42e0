"""What ``/healthz`` lists under ``degraded``: everything that keeps some chat from
being answered while the gateway itself still works; and under ``warnings``: what
leaves every chat answered, some messages less well.

``/healthz`` answers 200 while the gateway is up (Redis answers, even when it refuses
writes) and lists what is degraded: a channel not running, a gateway task that had to
be restarted, workers down, turns being retried, Redis refusing writes or short of
memory, the disk short of space, sent chunks whose record waits for Redis; ``ok`` is
false while any is. A warning leaves ``ok`` true: no transcription worker while voice
notes are transcribed (a voice note reaches the model untranscribed, told so, and its
job waits for a worker), as ``pynanoclaw status`` prints it as WARN, not FAIL. It
answers 503 only when Redis does not answer at all, so a container health check
restarts a gateway that cannot work, never one that waits for disk space or for one
platform.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def degraded(status: Mapping[str, Any]) -> list[str]:
    """One line per problem found in the rest of the ``/healthz`` status."""
    out: list[str] = []
    for name, state in status.get("channel_status", {}).items():
        start = state.get("start")
        if start != "running":
            error = f": {state['error']}" if state.get("error") else ""
            out.append(f"channel {name}: {start}{error}")
    for name in sorted(set(status.get("failed_tasks", []))):
        out.append(f"gateway task {name} ended unexpectedly and was restarted")
    workers = status.get("workers")
    if isinstance(workers, Mapping) and workers.get("alive", 0) < workers.get("count", 0):
        cause = f" (last: {workers['last_cause']})" if workers.get("last_cause") else ""
        out.append(f"workers: {workers['alive']} of {workers['count']} alive{cause}")
    embedded = str(status.get("embedded_redis") or "")
    if embedded and not embedded.startswith("refusing"):  # a refusal is listed from PING
        out.append(f"embedded redis: {embedded}")
    for turn in status.get("retrying_turns", []):
        cause = (f"last error {turn['error']}" if turn.get("error")
                 else "no error recorded: its worker died mid-turn")
        out.append(f"turn {turn['group']}: attempt {turn['attempts']}; {cause}")
    if status.get("unrecorded_chunks"):
        out.append(f"outbox: {status['unrecorded_chunks']} sent chunk(s) not yet recorded "
                   "in Redis (kept in memory; never sent again)")
    return out


def warnings(status: Mapping[str, Any]) -> list[str]:
    """One line per warning found in the ``/healthz`` status: every chat is still
    answered, some messages less well."""
    transcription = status.get("transcription")
    if isinstance(transcription, Mapping) and transcription.get("alive", 1) == 0:
        return [f"transcription: no worker alive on queue {transcription['queue']}; "
                "voice notes reach the model untranscribed"]
    return []
