"""Matrix adapter: matrix-nio /sync in, ``org.matrix.custom.html`` messages out."""

from __future__ import annotations

from channels.matrix.channel import MATRIX_LIMITS, MatrixChannel, transaction_id
from channels.matrix.settings import MatrixSettings

__all__ = ["MATRIX_LIMITS", "MatrixChannel", "MatrixSettings", "transaction_id"]
