"""Redaction's reach into Redis beyond the group's message lists: the turn state kept
for retries and extraction, the outbox and the local channel's reply streams, the
tool calls recorded for an admin's approval, the errors failed turns left.

``workers.redaction`` calls these under the group lock (no turn of the group runs, so
nothing of the group is added meanwhile). Only the fields that hold words are scrubbed
(a message's text, quote and platform event; a reply's text), never an id, a name or a
time, and a value is written back only when it changed. A stream is rebuilt
(``GroupQueue.restream``) rather than edited: an entry replaced or deleted with
``XDEL`` stays in its listpack, and so in ``DUMP``, RDB and the AOF's RDB preamble,
until the listpack is rewritten.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from channels.models import group_key
from gateway.queue import GroupQueue, as_str, encode_entry, parse_entry
from gateway.queue.approvals import Approval, ApprovalStore
from memory_store.maintenance import WordFinder, scrub_value

#: the fields of a held message (``Inbound``) that hold words (``raw``: the platform's
#: own event, which repeats the text); and each attachment's ``transcript`` (a voice
#: note's words, ``with_words``)
TEXT_FIELDS = ("text", "reply_to_text", "raw")


def with_words(msg: dict[str, Any], change: Callable[[Any], Any]) -> dict[str, Any]:
    """``msg`` (an ``Inbound`` as JSON) with ``change`` applied to what holds words: its
    ``TEXT_FIELDS`` and its attachments' transcripts (never a file's stored name)."""
    new = {k: change(v) if k in TEXT_FIELDS else v for k, v in msg.items()}
    if isinstance(atts := msg.get("attachments"), list):
        new["attachments"] = [
            {**a, "transcript": change(a["transcript"])}
            if isinstance(a, dict) and isinstance(a.get("transcript"), str) else a
            for a in atts]
    return new


def _object(raw: str) -> dict[str, Any] | None:
    """``raw`` parsed, when it is a JSON object."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _json_text(value: str, pat: WordFinder, key: str = "text") -> str:
    """``value``, a JSON object, with ``pat`` taken out of its ``key`` field."""
    doc = _object(value)
    if doc is None or not isinstance(doc.get(key), str):
        return value
    new = scrub_value(doc[key], pat)
    return value if new == doc[key] else json.dumps({**doc, key: new})


def scrub_entry(raw: str, pat: WordFinder) -> str:
    """A held message entry (``"<seq> <json>"``) with ``pat`` taken out of its
    words (``with_words``); ``raw`` itself when nothing matched or it is unreadable."""
    try:
        entry = parse_entry(raw)
    except ValueError:
        return raw
    msg = with_words(entry.msg, lambda v: scrub_value(v, pat))
    return raw if msg == entry.msg else \
        f"{entry.seq} {encode_entry(json.dumps(msg), entry.engaged)}"


def _queued_turn(raw: str, pat: WordFinder) -> str:
    """An ``extractq`` entry (``workers.extraction``: turn id, its batch's entries) with
    ``pat`` taken out of the entries."""
    item = _object(raw)
    if item is None or not isinstance(item.get("entries"), list):
        return raw
    entries = [scrub_entry(e, pat) if isinstance(e, str) else e for e in item["entries"]]
    return raw if entries == item["entries"] else json.dumps({**item, "entries": entries})


def _answer(result: str, pat: WordFinder) -> str:
    """An extraction's stored answer (``ExtractedFacts``) without the facts whose text
    holds ``pat``: retired before they are filed, as a filed one would be."""
    doc = _object(result)
    facts = None if doc is None else doc.get("facts")
    if doc is None or not isinstance(facts, list):
        return result
    kept = [f for f in facts if not (isinstance(f, dict) and
                                     scrub_value(str(f.get("fact", "")), pat) != f.get("fact"))]
    return result if kept == facts else json.dumps({**doc, "facts": kept})


def _of_group(fields: dict[str, str], group: str) -> bool:
    """Whether an outbox entry (``data``: an ``Outbound`` or a typing/done event with
    channel and chat id) is for ``group``."""
    try:
        data = json.loads(fields.get("data", ""))
        return group_key(str(data["channel"]), str(data["chat_id"])) == group
    except (ValueError, KeyError, TypeError):
        return False


def _restream(gq: GroupQueue, stream: str, pat: WordFinder, group: str | None,
              always: bool) -> int:
    """Rebuild ``stream`` with ``pat`` taken out of its entries' text (an outbox
    entry's ``data.text``, of ``group``'s entries only; a reply stream's ``text``) when
    an entry held it, or ``always``. Returns the entries changed."""
    replace: dict[str, list[str]] = {}
    entries: Any = gq.r.xrange(stream)
    for entry_id, raw in entries:
        fields = {as_str(k): as_str(v) for k, v in raw.items()}
        if group is not None and not _of_group(fields, group):
            continue
        new = dict(fields)
        if group is not None and "data" in fields:
            new["data"] = _json_text(fields["data"], pat)
        elif group is None and "text" in fields:
            new["text"] = scrub_value(fields["text"], pat)
        if new != fields:
            replace[as_str(entry_id)] = [x for kv in new.items() for x in kv]
    if replace or always:
        gq.restream(stream, replace)
    return len(replace)


def scrub_streams(gq: GroupQueue, pat: WordFinder) -> int:
    """Take ``pat`` out of the group's entries in the outbox and of its local reply
    streams. The outbox is rebuilt even if no live entry matched: the gateway ``XDEL``s
    what it sent, and a deleted entry's bytes stay until then. A reply stream is never
    ``XDEL``ed (only trimmed by whole nodes), so it is rebuilt only when an entry
    matched. Returns the entries changed."""
    n = _restream(gq, gq.keys.outbox, pat, gq.group, True)
    for key in gq.local_reply_streams():
        n += _restream(gq, key, pat, None, False)
    return n


def scrub_turn_state(gq: GroupQueue, turn_ids: Iterable[str], pat: WordFinder | None,
                     reword: Any = None) -> int:
    """Take ``pat`` (and ``reword``'s edits, a function of a text) out of the state
    Redis keeps of the group's turns: the published reply a retry replays
    (``turn:{id}``), the extraction's stored answer (``extract:{id}``), the tool output
    a retry is shown (``tools:once:{id}``) and the turns still queued for extraction
    (``extractq:{g}``). Returns the values changed."""
    n = 0
    queued = gq.keys.extractions(gq.group)
    raws = [as_str(x) for x in gq.r.lrange(queued, 0, -1)]  # type: ignore[union-attr]
    ids = sorted(set(turn_ids) | {t for t in map(_turn_of, raws) if t})
    with gq.r.pipeline(transaction=False) as pipe:  # one round trip for every turn
        for turn_id in ids:
            pipe.hget(gq.keys.turn(turn_id), "reply")
            pipe.hget(gq.keys.extraction(turn_id), "result")
            pipe.hgetall(gq.keys.tool_runs(turn_id))
        kept = pipe.execute()
    for turn_id, reply, result, runs in zip(ids, kept[::3], kept[1::3], kept[2::3],
                                           strict=True):
        if pat is not None and runs:
            n += _tool_runs(gq, turn_id, runs, pat)
        if reply is not None:
            old = as_str(reply)
            new = reword(old) if reword is not None else old
            new = scrub_value(new, pat) if pat is not None else new
            if new != old:
                gq.replace_turn_reply(turn_id, new)
                n += 1
        if pat is not None and result is not None and \
                (new := _answer(as_str(result), pat)) != as_str(result):
            gq.r.hset(gq.keys.extraction(turn_id), "result", new)
            n += 1
    if pat is not None:
        pairs: list[tuple[str, str | None]] = [
            (raw, new) for raw in raws if (new := _queued_turn(raw, pat)) != raw]
        n += gq.scrub(pairs, lists=[queued])
    return n


def _tool_runs(gq: GroupQueue, turn_id: str, runs: dict[Any, Any], pat: WordFinder) -> int:
    """The stored tool results of a turn (``gateway.queue.toolonce``) with ``pat``
    taken out of their output and error. Returns the results changed."""
    values = {as_str(field): as_str(raw) for field, raw in runs.items()}
    changed = {field: new for field, value in values.items()
               if (new := _tool_result(value, pat)) != value}
    if changed:
        gq.r.hset(gq.keys.tool_runs(turn_id), items=[x for kv in changed.items() for x in kv])
    return len(changed)


def _tool_result(value: str, pat: WordFinder) -> str:
    """A tool call's stored result (JSON) with ``pat`` taken out of its output and error."""
    return _json_text(_json_text(value, pat, "output"), pat, "error")


def scrub_approvals(gq: GroupQueue, pat: WordFinder) -> int:
    """Take ``pat`` out of the group's approval records (``gateway.queue.approvals``):
    the call's arguments and its stored result's output and error. Other chats'
    records are left as they are. Returns the records changed."""
    def scrub(a: Approval) -> tuple[dict[str, Any], str]:
        return scrub_value(a.args, pat), _tool_result(a.result, pat) if a.result else a.result

    return ApprovalStore(gq.r, gq.keys).redact(gq.group, scrub)


def scrub_failures(gq: GroupQueue, pat: WordFinder) -> int:
    """Take ``pat`` out of the errors the group's failed turns left, which may quote a
    message (a model's or a tool's complaint about its input): the dead-letter log's
    ``why`` (``deadlog:{g}``), the ``retrying`` note of the group's turn, and the
    ``last_error`` of those turns. Returns the values changed."""
    log_key, ids = gq.keys.dead_log(gq.group), set()
    pairs: list[tuple[str, str | None]] = []
    for raw in map(as_str, gq.r.lrange(log_key, 0, -1)):  # type: ignore[union-attr]
        ids.add(_turn_of(raw))
        if (new := _json_text(raw, pat, "why")) != raw:
            pairs.append((raw, new))
    n = gq.scrub(pairs, lists=[log_key])
    note: Any = gq.r.hget(gq.keys.retrying, gq.group)
    if note is not None:
        ids.add(_turn_of(as_str(note)))
        if (new := _json_text(as_str(note), pat, "error")) != as_str(note):
            gq.r.hset(gq.keys.retrying, gq.group, new)
            n += 1
    for turn_id in sorted(t for t in ids if t):
        error: Any = gq.r.hget(gq.keys.turn(turn_id), "last_error")
        if error is not None and (new := scrub_value(as_str(error), pat)) != as_str(error):
            gq.r.hset(gq.keys.turn(turn_id), "last_error", new)
            n += 1
    return n


def _turn_of(raw: str) -> str | None:
    """The turn id of a JSON record that names one (an ``extractq`` entry, a dead-letter
    log record, a ``retrying`` note)."""
    tid = (_object(raw) or {}).get("turn_id")
    return tid if isinstance(tid, str) else None

