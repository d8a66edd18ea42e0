"""The synthetic memory corpus of ``bench.memory_latency``, fixed by issue 12.

Deterministic from its seed (``SEED``); do not make it easier later: numbers in
bench/README.md are only comparable on this exact corpus.

- Vocabulary: the ~20,000 whole English words of MiniLM's WordPiece vocabulary (which
  lists words roughly by corpus frequency), drawn with a Zipf law (s = 1.1), so a few
  words are everywhere and most are rare, as in chat.
- Lengths: words per turn log-normal with median 20 (LoCoMo turns: ~23 words), 3..120;
  a sentence every 6-16 words, so most turns have 2-3 sentences and get sentence
  vectors, as real turns do.
- Time: sessions of 5-60 turns a minute or two apart, sessions 2 hours to 3 days apart,
  so episode windows and session smoothing see realistic neighbourhoods.
- Kinds: 90% episodes ("Speaker: text"), 8% facts, 2% procedures.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

SEED = 12
START = datetime(2024, 1, 1, tzinfo=UTC)
_VOCAB = Path(__file__).resolve().parents[1] / "memory_store" / "data" / "minilm_vocab.txt"
_NAMES = ["Alice", "Bob", "Carol", "Dan", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy",
          "Mallory", "Niaj", "Olivia", "Peggy", "Rupert", "Sybil", "Trent", "Victor",
          "Walter", "Yara", "Zoe", "Omar", "Priya", "Chen", "Lena", "Marco", "Sofia", "Kenji",
          "Amara", "Tomas"]


@dataclass(frozen=True)
class Item:
    id: str
    kind: str
    content: str
    created: datetime
    trust: float


def vocabulary() -> list[str]:
    words = []
    for line in _VOCAB.read_text(encoding="utf-8").splitlines():
        if line.isascii() and line.isalpha() and len(line) >= 2:
            words.append(line)
    return words


class Zipf:
    """Draws words with probability proportional to 1 / rank ** s."""

    def __init__(self, words: list[str], rng: random.Random, s: float = 1.1) -> None:
        self.words = words
        self.rng = rng
        self.cum = list(itertools.accumulate(1.0 / (r + 1) ** s for r in range(len(words))))

    def word(self) -> str:
        x = self.rng.random() * self.cum[-1]
        return self.words[min(bisect.bisect_left(self.cum, x), len(self.words) - 1)]


def _text(z: Zipf, rng: random.Random) -> str:
    n = max(3, min(120, int(rng.lognormvariate(3.0, 0.6))))
    out: list[str] = []
    until = rng.randint(6, 16)
    for i in range(n):
        w = z.word()
        out.append(w.capitalize() if i == 0 or out[-1].endswith(".") else w)
        until -= 1
        if until == 0 and i < n - 1:
            out[-1] += "."
            until = rng.randint(6, 16)
    return " ".join(out) + "."


def items(n: int, seed: int = SEED) -> Iterator[Item]:
    """The first ``n`` memories of the corpus (a prefix of every larger size)."""
    rng = random.Random(seed)
    z = Zipf(vocabulary(), rng)
    when = START
    left_in_session = 0
    for i in range(n):
        if left_in_session == 0:
            left_in_session = rng.randint(5, 60)
            when += timedelta(minutes=rng.randint(120, 3 * 24 * 60))
        left_in_session -= 1
        when += timedelta(seconds=rng.randint(20, 150))
        roll = rng.random()
        kind = "episode" if roll < 0.90 else "fact" if roll < 0.98 else "procedure"
        text = _text(z, rng)
        if kind == "episode":
            text = f"{rng.choice(_NAMES)}: {text}"
        yield Item(id=f"m{i:07d}", kind=kind, content=text, created=when,
                   trust=round(rng.uniform(0.3, 1.0), 2))


def queries(n: int, seed: int = SEED + 1) -> list[str]:
    """Questions built from the same word distribution (so they hit like real ones)."""
    rng = random.Random(seed)
    z = Zipf(vocabulary(), rng)
    forms = ["what did {n} say about {a} and {b}", "when did we talk about {a} {b}",
             "{a} {b} {c}", "does {n} remember the {a}", "tell me about {a} and {b} {c}"]
    return [rng.choice(forms).format(n=rng.choice(_NAMES), a=z.word(), b=z.word(),
                                     c=z.word()) for _ in range(n)]
