"""Split a reply into platform-sized chunks without breaking what the reader sees.

``split_text`` is pure: the same text and limit always give the same chunks, so a
retried send re-sends identical chunks. It cuts at the best boundary that fits, in
this order of preference: paragraph, line, sentence, word, hard cut. It never cuts
inside a fenced code block while another cut fits; a fence that is itself longer
than a chunk is closed at the chunk's end and reopened (same opener line, so the same
language) at the start of the next chunk.

Promises, for every ``limit`` the text can be split at (see ``split_text``):

* every chunk satisfies ``measure(chunk) <= limit``;
* ``"".join(chunks) == text`` whenever no fence had to be reopened; in general the
  chunks are the text with only fence closers and reopeners added (``split_spans``
  exposes exactly what was added);
* no cut falls inside a surrogate pair (relevant to strings built with
  ``surrogatepass``), nor, when avoidable, before a combining mark or inside a
  zero-width-joiner emoji sequence.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

Measure = Callable[[str], int]

__all__ = ["Span", "split_spans", "split_text", "utf8_len", "utf16_len"]


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units: what Telegram counts for its 4096 limit.

    Characters outside the Basic Multilingual Plane (most emoji) count as two.
    """
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def utf8_len(text: str) -> int:
    """Length in UTF-8 bytes: what Matrix (its event size limit) and signal-cli (its
    2000-byte body) count."""
    return len(text.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True)
class Span:
    """One chunk as ``prefix + text[start:end] + suffix``.

    ``prefix`` is a reopened fence's opener line and ``suffix`` a fence closer; both
    are empty unless a code fence had to be cut.
    """

    start: int
    end: int
    prefix: str = ""
    suffix: str = ""

    def render(self, text: str) -> str:
        return self.prefix + text[self.start : self.end] + self.suffix


@dataclass(frozen=True)
class _Fence:
    start: int  # first char of the opener line
    body: int  # first char after the opener line
    close: int  # first char of the closing line (len(text) when unclosed)
    end: int  # first char after the closing line (len(text) when unclosed)
    opener: str  # the opener line including its newline, reused to reopen
    marker: str  # the fence characters, e.g. "```"


_OPEN = re.compile(r"^( {0,3})(`{3,}|~{3,})([^\n]*)$")
_CLOSE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")


def _find_fences(text: str) -> list[_Fence]:
    """CommonMark-style fenced blocks: up to 3 spaces of indent, ``` or ~~~ (3+),
    closed by a line of at least as many of the same character."""
    fences: list[_Fence] = []
    # "\n" only (not str.splitlines): the same line notion as the cut patterns below
    lines = [line + "\n" for line in text.split("\n")]
    lines[-1] = lines[-1][:-1]
    offset = 0
    current: tuple[int, int, str, str] | None = None  # start, body, opener, marker
    for line in lines:
        bare = line.rstrip("\r\n")
        line_start = offset
        offset += len(line)
        if current is None:
            m = _OPEN.match(bare)
            if m is None:
                continue
            marker, info = m.group(2), m.group(3)
            if marker[0] == "`" and "`" in info:
                continue  # not a fence per CommonMark: backticks in the info string
            opener = line if line.endswith("\n") else line + "\n"
            current = (line_start, offset, opener, marker)
        else:
            m = _CLOSE.match(bare)
            marker = current[3]
            if m and m.group(1)[0] == marker[0] and len(m.group(1)) >= len(marker):
                fences.append(_Fence(current[0], current[1], line_start, offset, *current[2:]))
                current = None
    if current is not None:
        n = len(text)
        fences.append(_Fence(current[0], current[1], n, n, *current[2:]))
    return fences


# Candidate cut positions per preference level: a cut goes after the match, so the
# separator (and its whitespace) stays at the end of the earlier chunk.
_PARAGRAPH = re.compile(r"\n[ \t]*\n\s*")
_LINE = re.compile(r"\n\s*")
# ASCII and typographic sentence ends (ellipsis, closing quotes), and CJK stops without a space
_SENTENCE = re.compile(r"(?:[.!?\u2026][\"'\u201d\u2019)\]]*\s+|[\u3002\uff01\uff1f]\s*)")
_WORD = re.compile(r"\s+")
_PROSE_LEVELS = (_PARAGRAPH, _LINE, _SENTENCE, _WORD)
_CODE_LEVELS = (_LINE, _WORD)

#: a cut at a preferred boundary must keep at least this share of the window;
#: otherwise a later, lesser boundary wins (avoids a 10-char chunk before a 4000-char one)
_MIN_FILL = 0.5

_JOINERS = frozenset("\u200d\ufe0e\ufe0f")


def _is_high(ch: str) -> bool:
    return "\ud800" <= ch <= "\udbff"


def _is_low(ch: str) -> bool:
    return "\udc00" <= ch <= "\udfff"


def _bad_hard_cut(text: str, p: int) -> bool:
    if p <= 0 or p >= len(text):
        return False
    before, after = text[p - 1], text[p]
    return (
        (_is_high(before) and _is_low(after))
        or unicodedata.combining(after) != 0
        or after in _JOINERS
        or before == "\u200d"
        or "\U0001f3fb" <= after <= "\U0001f3ff"  # skin-tone modifier
    )


def _hard_cut(text: str, lo: int, hi: int) -> int:
    """The last position in (lo, hi] that does not break a character or cluster."""
    p = hi
    while p > lo + 1 and _bad_hard_cut(text, p) and hi - p < 16:
        p -= 1
    if _bad_hard_cut(text, p) and _is_high(text[p - 1]) and p - 1 > lo:
        return p - 1  # a surrogate pair is never split, even when clusters must be
    return p


def _window_end(text: str, pos: int, budget: int, measure: Measure) -> int:
    """Largest ``e`` with ``measure(text[pos:e]) <= budget`` (prefix measure is monotone,
    so a binary search over the ends after ``pos`` finds it)."""
    ends = range(pos + 1, len(text) + 1)
    return pos + bisect.bisect_right(ends, budget, key=lambda e: measure(text[pos:e]))


def _best_cut(
    text: str,
    lo: int,
    hi: int,
    levels: tuple[re.Pattern[str], ...],
    allowed: Callable[[int], bool],
) -> int | None:
    """Best cut in (lo, hi]: the most preferred level that fills at least half the
    window, else the furthest boundary of any level, else a hard cut."""
    window = text[lo:hi]
    found: list[int] = []
    for pattern in levels:
        best = None
        for m in pattern.finditer(window):
            p = lo + m.end()
            if p > lo and allowed(p):
                best = p
        if best is not None:
            if best - lo >= (hi - lo) * _MIN_FILL:
                return best
            found.append(best)
    if found:
        return max(found)
    p = _hard_cut(text, lo, hi)
    while p > lo and not allowed(p):
        p -= 1
    return p if p > lo else None


def split_spans(text: str, limit: int, measure: Measure = len) -> list[Span]:
    """The chunks of ``split_text`` as spans of ``text`` plus any fence repair.

    Consecutive spans are contiguous (``spans[i].end == spans[i+1].start``) and cover
    the whole text; this is what the property tests check "nothing lost" against.
    Raises ``ValueError`` when ``limit`` cannot hold even one character.
    """
    if limit < 1:
        raise ValueError(f"limit must be positive, got {limit}")
    if not text:
        return []
    fences = _find_fences(text)
    # A fence can be repaired only if its opener and closer leave room for content;
    # with absurdly small limits the fence is split like plain text instead.
    broken = {
        i for i, f in enumerate(fences) if measure(f.opener) + measure("\n" + f.marker) > limit // 2
    }

    def fence_at(p: int) -> int | None:
        return next((i for i, f in enumerate(fences) if i not in broken and f.start < p < f.end),
                    None)

    def outside(p: int) -> bool:
        return fence_at(p) is None

    spans: list[Span] = []
    pos, prefix = 0, ""
    while pos < len(text):
        budget = limit - measure(prefix)
        if measure(text[pos:]) <= budget:
            spans.append(Span(pos, len(text), prefix))
            break
        end = _window_end(text, pos, budget, measure)
        if end <= pos:
            raise ValueError(f"limit {limit} cannot hold the character at {pos}")
        cut = _best_cut(text, pos, end, _PROSE_LEVELS, outside)
        if cut is not None:
            spans.append(Span(pos, cut, prefix))
            pos, prefix = cut, ""
            continue
        # Every position that fits lies inside one fence: cut inside it and repair.
        index = fence_at(pos + 1)
        assert index is not None  # otherwise a hard cut would have been allowed
        fence = fences[index]
        closer = "\n" + fence.marker
        end = _window_end(text, pos, budget - measure(closer), measure)
        lo = max(pos, fence.body)
        cut = _best_cut(text, lo, min(end, fence.close), _CODE_LEVELS, lambda p: True)
        if cut is None or end <= lo:
            broken.add(index)  # no room to repair this fence: split it as plain text
            continue
        suffix = fence.marker if text[cut - 1] == "\n" else closer
        spans.append(Span(pos, cut, prefix, suffix))
        pos, prefix = cut, fence.opener
    return spans


def split_text(text: str, limit: int, measure: Measure = len) -> list[str]:
    """Split ``text`` into chunks with ``measure(chunk) <= limit`` each.

    ``measure`` counts what the platform counts (``len`` for code points,
    ``utf16_len`` for Telegram). Empty text gives no chunks. Raises ``ValueError``
    when ``limit`` is smaller than a single character's measure.
    """
    return [span.render(text) for span in split_spans(text, limit, measure)]
