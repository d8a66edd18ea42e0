"""The three Memory backends: file (BM25), vector (local embeddings), hybrid (fused)."""
