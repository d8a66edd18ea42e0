"""``Recent``: a dict that keeps only its newest keys, for the adapters' bounded
in-memory caches (names, seen ids, delivery outcomes)."""

from __future__ import annotations

from collections import OrderedDict
from typing import TypeVar

K = TypeVar("K")
V = TypeVar("V")


class Recent(OrderedDict[K, V]):
    """An ``OrderedDict`` of at most ``size`` keys: setting a key makes it the newest,
    and the oldest beyond ``size`` are dropped."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def __setitem__(self, key: K, value: V) -> None:
        super().__setitem__(key, value)
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)
