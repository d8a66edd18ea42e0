"""The words of a deleted message: what else is removed with it, and how it is found.

A deleted message's own line is replaced whole; elsewhere (the bot's reply quoting it, a
later episode, a fact, core memory, Redis) only its *words* are removed, so that "ok" or
"see you at the" is not erased from everyone's text. The one definition
(``message_words``):

* a *token* is a run of letters and digits, inner ``- ' . @ / : +`` (and the
  typographic apostrophe) joining runs
  (``MARK-mx1``, ``o'clock``, ``alice@example.org``, ``https://x.io/a``);
* a *stop word* is one of ``STOP_WORDS`` (common English function words, long ones
  included: "everyone", "something");
* the words are each token of at least ``LONG_TOKEN`` (8) characters that is not a stop
  word, and each run of ``RUN_TOKENS`` (3) consecutive tokens that holds a token of at
  least ``RUN_ANCHOR`` (5) characters that is not a stop word; and, when there is any
  such, the whole text too (a quote of all of "my door code is 4417 Zanzibar" goes
  whole, though "my door code" alone is no run).

A run is found wherever its tokens occur as consecutive tokens, in any case, whatever
non-word characters (punctuation, line breaks) lie between them; runs that overlap
merge, so a quote of five consecutive tokens is removed whole. A long token is found
in any case wherever no letter or digit touches it (not in ``MARK-mx10``; in
``MARK-mx1's``). ``WordsMatcher`` finds them, together with ``/forget`` phrases (found
anywhere, in any case, as before).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

#: a token this long (characters) is removed on its own
LONG_TOKEN = 8
#: consecutive tokens that make a run
RUN_TOKENS = 3
#: a run counts only when it holds a non-stop token this long (characters)
RUN_ANCHOR = 5
#: what a removal leaves in place of the words
REDACTED_MARKER = "[redacted]"
#: the marker's own word: never itself removed, or a second run would wrap it again
_MARKER_WORD = "redacted"

TOKEN = re.compile(r"\w+(?:[-'\u2019.@/:+]\w+)*")

_STOP_TEXT = """
a about above after again against all also am an and any are as at be because been before
being below between both but by can could did do does doing down during each else even
ever every few for from further had has have having he her here hers herself him himself
his how i if in into is it its itself just let me more most my myself no nor not now of
off on once only or other our ours ourselves out over own same she should so some such
than that the their theirs them themselves then there these they this those through to
too under until up very was we were what when where which while who whom why will with
would you your yours yourself yourselves
anybody anyone anything everybody everyone everything nobody nothing somebody someone
something somewhere anywhere everywhere nowhere whatever whenever wherever whichever
whoever although however therefore otherwise actually probably basically definitely
really maybe perhaps already almost always never sometimes usually tomorrow yesterday
today tonight morning evening afternoon please thanks thank hello sorry okay yes yeah
"""
STOP_WORDS = frozenset(_STOP_TEXT.split())


@dataclass(frozen=True)
class MessageWords:
    """The words of one text: long tokens, and runs (each a tuple of tokens)."""

    tokens: tuple[str, ...]
    runs: tuple[tuple[str, ...], ...]
    #: the text's tokens, all of them, when it has words (``None`` when it has none)
    whole: tuple[str, ...] | None = None

    def __bool__(self) -> bool:
        return bool(self.tokens or self.runs)


def _stop(token: str) -> bool:
    return token.casefold() in STOP_WORDS


def message_words(text: str) -> MessageWords:
    """The words of ``text`` that are removed wherever else they occur (module
    docstring): long non-stop tokens and anchored runs of consecutive tokens."""
    toks = [t for t in TOKEN.findall(text) if t.casefold() != _MARKER_WORD]
    longs = {t.casefold(): t for t in toks if len(t) >= LONG_TOKEN and not _stop(t)}
    runs: dict[tuple[str, ...], tuple[str, ...]] = {}
    for i in range(len(toks) - RUN_TOKENS + 1):
        run = tuple(toks[i:i + RUN_TOKENS])
        if any(len(t) >= RUN_ANCHOR and not _stop(t) for t in run):
            runs.setdefault(tuple(t.casefold() for t in run), run)
    whole = tuple(toks) if longs or runs else None
    return MessageWords(tuple(longs.values()), tuple(runs.values()), whole)


class WordsMatcher:
    """Finds deleted messages' words and ``/forget`` phrases in text; overlapping hits
    merge into one span (one marker).

    Runs are compared token by token (the text is tokenized once, so the cost grows
    with the text, not with the number of runs); long tokens and phrases are one
    case-insensitive pattern (a token only where no letter or digit touches it)."""

    def __init__(self, runs: set[tuple[str, ...]], literal: re.Pattern[str] | None) -> None:
        #: casefolded runs by their first token (a whole text is a long run)
        self._runs: dict[str, list[tuple[str, ...]]] = {}
        for run in sorted(runs, key=len, reverse=True):
            self._runs.setdefault(run[0], []).append(run)
        self._literal = literal

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The merged spans of ``text`` that hold the words, in order."""
        found = [m.span() for m in self._literal.finditer(text)] if self._literal else []
        if self._runs:
            toks = list(TOKEN.finditer(text))
            words = [t.group().casefold() for t in toks]
            for i, word in enumerate(words):
                for run in self._runs.get(word, ()):
                    if tuple(words[i:i + len(run)]) == run:
                        found.append((toks[i].start(), toks[i + len(run) - 1].end()))
                        break  # the longest run starting here
        out: list[tuple[int, int]] = []
        for start, end in sorted(found):
            if out and start <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], end))
            elif end > start:
                out.append((start, end))
        return out

    def search(self, text: str) -> bool:
        return bool(self.spans(text))

    def sub(self, repl: Callable[[str], str], text: str) -> str:
        """``text`` with each merged span replaced by ``repl(span text)``."""
        spans = self.spans(text)
        if not spans:
            return text
        parts: list[str] = []
        last = 0
        for start, end in spans:
            parts += [text[last:start], repl(text[start:end])]
            last = end
        parts.append(text[last:])
        return "".join(parts)


def words_matcher(texts: Iterable[str] = (), phrases: Iterable[str] = ()
                  ) -> WordsMatcher | None:
    """A matcher for the words (``message_words``) of each of ``texts`` and for each of
    ``phrases`` taken literally; None when there is nothing to find."""
    runs: set[tuple[str, ...]] = set()
    tokens: set[str] = set()
    for text in texts:
        words = message_words(text)
        tokens |= set(words.tokens)  # as written: the pattern ignores case itself
        for run in (*words.runs, *([words.whole] if words.whole else [])):
            runs.add(tuple(t.casefold() for t in run))
    alts = [rf"(?<!\w)(?:{'|'.join(map(re.escape, sorted(tokens, key=len, reverse=True)))})"
            r"(?!\w)"] if tokens else []
    literal = sorted({p for p in phrases if p}, key=len, reverse=True)
    alts += [re.escape(p) for p in literal]
    if not runs and not alts:
        return None
    return WordsMatcher(runs, re.compile("|".join(alts), re.IGNORECASE) if alts else None)


def words_pattern(words: Iterable[str]) -> re.Pattern[str] | None:
    """One case-insensitive pattern matching any of ``words`` (longest first); None
    when there is none (the marker itself never counts)."""
    alts = sorted({w for w in words if w and w != REDACTED_MARKER}, key=len, reverse=True)
    if not alts:
        return None
    return re.compile("|".join(re.escape(w) for w in alts), re.IGNORECASE)


#: what a rewrite looks for: an edit's old text, a ``/forget`` phrase (a pattern), or a
#: deletion's words (``WordsMatcher``)
WordFinder = re.Pattern[str] | WordsMatcher


def scrub_value(value: Any, pat: WordFinder, repl: str = REDACTED_MARKER) -> Any:
    """``value`` (front-matter metadata, or any JSON value) with every match of ``pat``
    replaced by ``repl`` (the marker; an edit's new text), taken literally."""
    if isinstance(value, str):
        return pat.sub(lambda _: repl, value)
    if isinstance(value, list):
        return [scrub_value(v, pat, repl) for v in value]
    if isinstance(value, dict):
        return {k: scrub_value(v, pat, repl) for k, v in value.items()}
    return value
