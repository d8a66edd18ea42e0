"""The memory part of the prompt within a token budget.

Order and shares: core memory first (the operator's global ``CLAUDE.md``, the group's
``CLAUDE.md``, ``user_profile.md``), each capped at ``CORE_SHARE`` of the budget and cut
with a note saying how much was left out; then retrieved records in score order,
deduplicated (by id and by text), each rendered exactly as the prompt shows it (with its
source and trust) and counted, while they fit. Records that do not fit are counted, and
the prompt says how many were left out.

Tokens are counted with the WordPiece vocabulary that ships with ``memory_store`` (the
embedder's, ``memory_store/data/minilm_vocab.txt``) through ``tokenizers``: no download
at run time. It is not the chat model's own tokenizer, so a budget is an estimate of the
model's count (English text comes out within a few percent of BPE tokenizers' counts).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memory_store import CoreMemory, MemoryRecord
from memory_store.index import VOCAB_PATH
from workers.prompt import cut_at_line, render_record

#: Each core file may take at most this share of the memory budget.
CORE_SHARE = 0.25
#: Tokens kept free for the cut note when a core file is cut.
_NOTE_TOKENS = 24
#: Tokens kept free for what wraps the memory part in the prompt (the core blocks' and
#: the results block's tags, the left-out note), so the whole part stays within budget.
WRAPPER_TOKENS = 100


@functools.lru_cache(maxsize=1)
def _tokenizer() -> Any:
    from tokenizers.implementations.bert_wordpiece import BertWordPieceTokenizer

    return BertWordPieceTokenizer(str(VOCAB_PATH), lowercase=True, clean_text=True,
                                  handle_chinese_chars=True, strip_accents=None)


#: Most of what a turn counts was counted on the last turn: the tool definitions and
#: instructions of every request's estimate (``workers.metering``), a request's history
#: again after each tool call, a group's memory records. A cache hit hashes the text
#: instead of tokenizing it; 256 entries bound what it holds.
@functools.lru_cache(maxsize=256)
def count_tokens(text: str) -> int:
    """Tokens of ``text`` (WordPiece, no special tokens)."""
    if not text:
        return 0
    return len(_tokenizer().encode(text, add_special_tokens=False).ids)


def cut_to_tokens(text: str, limit: int, what: str) -> tuple[str, int]:
    """``text`` within ``limit`` tokens (a note included when cut) and its token count."""
    enc = _tokenizer().encode(text, add_special_tokens=False)
    total = len(enc.ids)
    if total <= limit:
        return text, total
    keep = max(limit - _NOTE_TOKENS, 0)
    end = enc.offsets[keep - 1][1] if keep else 0
    cut = cut_at_line(text, end)
    shown = count_tokens(cut)
    out = f"{cut}\n[cut to fit the prompt budget: {total - shown} more tokens of {what} not shown]"
    return out, count_tokens(out)


@dataclass(frozen=True)
class MemoryContext:
    """What of memory goes into one prompt."""

    #: the core texts, cut to their shares
    core: CoreMemory
    records: list[MemoryRecord]
    #: Records that did not fit the budget (duplicates are not counted).
    omitted: int
    #: Tokens of the core texts and of the rendered records.
    tokens: int
    budget: int


def _key(rec: MemoryRecord) -> str:
    return " ".join(rec.content.split()).casefold()


def fit_memory(
    core: CoreMemory,
    results: Sequence[MemoryRecord],
    budget: int,
) -> MemoryContext:
    """Core memory then ``results`` (best first) within ``budget`` tokens."""
    cap = int(budget * CORE_SHARE)
    room = budget - WRAPPER_TOKENS
    used = 0
    texts: list[str] = []
    for text, what in ((core.global_md, "global CLAUDE.md"), (core.group_md, "CLAUDE.md"),
                       (core.profile_md, "user_profile.md")):
        cut, n = cut_to_tokens(text.strip(), cap, what) if text.strip() else ("", 0)
        texts.append(cut)
        used += n
    kept: list[MemoryRecord] = []
    seen_ids: set[str] = set()
    seen_text: set[str] = set()
    omitted = 0
    for rec in results:
        if rec.id in seen_ids or _key(rec) in seen_text:
            continue
        seen_ids.add(rec.id)
        seen_text.add(_key(rec))
        n = count_tokens(render_record(rec))
        if used + n > room:
            omitted += 1  # a shorter, lower-ranked record may still fit
            continue
        kept.append(rec)
        used += n
    return MemoryContext(CoreMemory(*texts), kept, omitted, used, budget)
