"""A per-process cache of values that never change once made, least recently used first out, bounded by a size
each value is given (entries of a timeline, bytes of text). Thread-safe: gunicorn's threads share it. Callers must
not modify what it returns."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

Value = TypeVar("Value")


class BoundedCache(Generic[Value]):
    def __init__(self, max_size: int, size_of: Callable[[Value], int]):
        self.max_size, self.size_of = max_size, size_of
        self._items: OrderedDict[Hashable, tuple[Value, int]] = OrderedDict()
        self._held = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Value | None:
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: Hashable, value: Value) -> None:
        size = self.size_of(value) + 1
        if size > self.max_size:
            return  # one huge value would push every other out: it is made again each time
        with self._lock:
            if key in self._items:
                return
            self._items[key] = (value, size)
            self._held += size
            while self._held > self.max_size:
                _, (_, dropped) = self._items.popitem(last=False)
                self._held -= dropped

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._held = 0
