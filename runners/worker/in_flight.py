"""One operation per offer in one process (SPEC §3.5, §3.12, §3.15; decision WR-5).

Concurrent duplicate deliveries of one `offer_id` join the operation in flight and receive its
result (ADR-0021 §1); concurrent recovery or lease-loss notifications of one offer coalesce the
same way. `InFlight.run(key, tag, operation)` runs `operation` unless one is in flight for
`key`: a caller with an equal `tag` waits for it and returns its result (or its exception); a
caller with another tag (a newer lease, a conflicting offer) waits and then tries again, so its
own delivery is still validated. `try_run` never waits: `None` when the key is busy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class InFlight(Generic[K, V]):
    def __init__(self) -> None:
        self._ops: dict[K, tuple[object, Future[V]]] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"InFlight(active={len(self._ops)})"

    def active(self, key: K) -> bool:
        with self._lock:
            return key in self._ops

    def run(self, key: K, tag: object, operation: Callable[[], V]) -> V:
        while True:
            with self._lock:
                running = self._ops.get(key)
                if running is None:
                    future: Future[V] = Future()
                    self._ops[key] = (tag, future)
                    break
            first, pending = running
            try:
                result = pending.result()
            except BaseException:
                if first == tag:
                    raise
            else:
                if first == tag:
                    return result
        return self._own(key, future, operation)

    def try_run(self, key: K, tag: object, operation: Callable[[], V]) -> V | None:
        with self._lock:
            if key in self._ops:
                return None
            future: Future[V] = Future()
            self._ops[key] = (tag, future)
        return self._own(key, future, operation)

    def _own(self, key: K, future: Future[V], operation: Callable[[], V]) -> V:
        try:
            result = operation()
        except BaseException as exc:
            future.set_exception(exc)
            raise
        else:
            future.set_result(result)
            return result
        finally:
            with self._lock:
                self._ops.pop(key, None)
