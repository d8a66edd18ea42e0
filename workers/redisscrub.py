"""Redaction's reach into Redis beyond the group's message lists: the turn state kept
for retries and extraction, the outbox and the local channel's reply streams.

``workers.redaction`` calls these under the group lock (no turn of the group runs, so
nothing of the group is added meanwhile). A value is scrubbed as JSON when it is JSON
(so text that JSON escapes is still found), else as plain text, and written back only
when it changed. A stream is rebuilt (``GroupQueue.restream``) rather than edited: an
entry replaced or deleted with ``XDEL`` stays in its listpack, and so in ``DUMP``, RDB
and the AOF's RDB preamble, until the listpack is rewritten.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from channels.models import group_key
from gateway.queue import GroupQueue, as_str
from memory_store.words import Finder, scrub_value


def scrubbed(value: str, pat: Finder) -> str:
    """``value`` (a stored JSON document or plain text) with ``pat``'s matches replaced
    by the marker; ``value`` itself when nothing matched."""
    if value[:1] in ("{", "["):
        try:
            doc = json.loads(value)
        except ValueError:
            doc = None
        if doc is not None:
            new = scrub_value(doc, pat)
            return value if new == doc else json.dumps(new, separators=(",", ":"))
    new_text: str = scrub_value(value, pat)
    return new_text


def _of_group(fields: dict[str, str], group: str) -> bool:
    """Whether an outbox entry (``data``: an ``Outbound`` or a typing/done event with
    channel and chat id) is for ``group``."""
    try:
        data = json.loads(fields.get("data", ""))
        return group_key(str(data["channel"]), str(data["chat_id"])) == group
    except (ValueError, KeyError, TypeError):
        return False


def _restream(gq: GroupQueue, stream: str, pat: Finder | None, group: str | None,
              always: bool) -> int:
    """Rebuild ``stream`` with ``pat`` scrubbed from the entries (of ``group`` only,
    when given) when an entry held it, or ``always``. Returns the entries changed."""
    replace: dict[str, list[str]] = {}
    entries: Any = gq.r.xrange(stream)
    for entry_id, raw in entries:
        fields = {as_str(k): as_str(v) for k, v in raw.items()}
        if pat is None or (group is not None and not _of_group(fields, group)):
            continue
        new = {k: scrubbed(v, pat) for k, v in fields.items()}
        if new != fields:
            replace[as_str(entry_id)] = [x for kv in new.items() for x in kv]
    if replace or always:
        gq.restream(stream, replace)
    return len(replace)


def scrub_streams(gq: GroupQueue, pat: Finder | None, *, rebuild_outbox: bool) -> int:
    """Take ``pat`` out of the group's entries in the outbox and of its local reply
    streams. The outbox is rebuilt when ``rebuild_outbox`` even if no live entry
    matched: the gateway ``XDEL``s what it sent, and a deleted entry's bytes stay
    until then. A reply stream is never ``XDEL``ed (only trimmed by whole nodes), so
    it is rebuilt only when an entry matched. Returns the entries changed."""
    n = _restream(gq, gq.keys.outbox, pat, gq.group, rebuild_outbox)
    if pat is not None:
        for key in gq.local_reply_streams():
            n += _restream(gq, key, pat, None, False)
    return n


def scrub_turn_state(gq: GroupQueue, turn_ids: Iterable[str], pat: Finder | None,
                     reword: Any = None) -> int:
    """Take ``pat`` (and ``reword``'s edits, a function of a text) out of the state
    Redis keeps of the group's turns: the published reply a retry replays
    (``turn:{id}``), the extraction's stored answer (``extract:{id}``) and the turns
    still queued for extraction (``extractq:{g}``). Returns the values changed."""
    n = 0
    queued = gq.keys.extractions(gq.group)
    raws = [as_str(x) for x in gq.r.lrange(queued, 0, -1)]  # type: ignore[union-attr]
    ids = sorted(set(turn_ids) | {t for t in map(_turn_of, raws) if t})
    with gq.r.pipeline(transaction=False) as pipe:  # one round trip for every turn
        for turn_id in ids:
            pipe.hget(gq.keys.turn(turn_id), "reply")
            pipe.hget(gq.keys.extraction(turn_id), "result")
        kept = pipe.execute()
    for turn_id, reply, result in zip(ids, kept[::2], kept[1::2], strict=True):
        if reply is not None:
            old = as_str(reply)
            new = reword(old) if reword is not None else old
            new = scrubbed(new, pat) if pat is not None else new
            if new != old:
                gq.replace_turn_reply(turn_id, new)
                n += 1
        if pat is not None and result is not None and \
                (new := scrubbed(as_str(result), pat)) != as_str(result):
            gq.r.hset(gq.keys.extraction(turn_id), "result", new)
            n += 1
    if pat is not None:
        pairs: list[tuple[str, str | None]] = [
            (raw, new) for raw in raws if (new := scrubbed(raw, pat)) != raw]
        n += gq.scrub(pairs, lists=[queued])
    return n


def _turn_of(raw: str) -> str | None:
    """The turn id of an ``extractq`` entry (``workers.extraction``: turn id, entries)."""
    try:
        item = json.loads(raw)
    except ValueError:
        return None
    tid = item.get("turn_id") if isinstance(item, dict) else None
    return tid if isinstance(tid, str) else None

