"""Where the embedder's WordPiece vocabulary lives (``memory_store/data``, Apache-2.0, see
``data/NOTICE.md``): a module of its own so a token count (the worker's memory budget)
finds it without loading the embedder's numpy."""

from __future__ import annotations

from pathlib import Path

VOCAB_PATH = Path(__file__).parents[1] / "data" / "minilm_vocab.txt"
