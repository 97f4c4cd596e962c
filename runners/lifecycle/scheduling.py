"""Where a cadence lifecycle's time comes from: one daemon thread in production, a stepped clock
in tests (SPEC §6.1 L-2, L-3; FP-1).

A `Scheduler` serves exactly one lifecycle. It holds at most one pending call (arming replaces
the previous one, cancelling drops it), runs a due call on its own thread, and waits for events.
- `DaemonScheduler`: one daemon `threading.Thread` per lifecycle, created at the first `call_later`
  (never at construction, L-1) and ended by `close()`. The due call runs on that thread, so a
  process holds exactly one thread per started lifecycle (CAD-09), and the thread never keeps the
  interpreter alive (L-3).
- `SteppedScheduler`: nothing runs until the test calls `advance(ms)`, which fires the due call on
  the test's thread; `wait` never blocks, it moves the stepped clock by the timeout instead. Tests
  step a lifecycle deterministically with it (no sleeps).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["DaemonScheduler", "Scheduler", "SteppedScheduler"]


class Scheduler(Protocol):
    """The time port of one cadence lifecycle."""

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> None:
        """Arm the one pending call, replacing any earlier one."""
        ...

    def cancel(self) -> None:
        """Drop the pending call, if any (a call already running is not interrupted)."""
        ...

    def wait(self, event: threading.Event, timeout_ms: int) -> bool:
        """Wait at most `timeout_ms` for `event`; whether it is set."""
        ...

    def monotonic_ms(self) -> int:
        """A monotonic time for durations."""
        ...

    def close(self) -> None:
        """No further calls; a thread of its own ends."""
        ...


class DaemonScheduler:
    """One daemon thread that sleeps until the pending call is due, then runs it (L-3)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._cond = threading.Condition()
        self._due_s: float | None = None
        self._callback: Callable[[], None] | None = None
        self._closed = False
        self._thread: threading.Thread | None = None

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> None:
        with self._cond:
            if self._closed:
                return
            self._due_s = time.monotonic() + delay_ms / 1000
            self._callback = callback
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()

    def cancel(self) -> None:
        with self._cond:
            self._due_s = None
            self._callback = None
            self._cond.notify()

    def wait(self, event: threading.Event, timeout_ms: int) -> bool:
        return event.wait(timeout_ms / 1000)

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._due_s = None
            self._callback = None
            self._cond.notify()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def thread(self) -> threading.Thread | None:
        """The scheduler's thread, once started (tests and footprint reports read it)."""
        return self._thread

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._closed:
                    if self._due_s is not None:
                        remaining = self._due_s - time.monotonic()
                        if remaining <= 0:
                            break
                        self._cond.wait(remaining)
                    else:
                        self._cond.wait()
                if self._closed:
                    return
                callback, self._callback, self._due_s = self._callback, None, None
            if callback is not None:
                callback()


@dataclass(slots=True)
class SteppedScheduler:
    """A scheduler that moves only when the test says so (deterministic L-rule tests)."""

    now_ms: int = 0
    closed: bool = False
    #: Every `call_later` delay, in order (the tests read the cadence from it).
    armed: list[int] = field(default_factory=list)
    _due_ms: int | None = None
    _callback: Callable[[], None] | None = None

    def call_later(self, delay_ms: int, callback: Callable[[], None]) -> None:
        if self.closed:
            return
        self.armed.append(delay_ms)
        self._due_ms = self.now_ms + delay_ms
        self._callback = callback

    def cancel(self) -> None:
        self._due_ms = None
        self._callback = None

    def wait(self, event: threading.Event, timeout_ms: int) -> bool:
        if not event.is_set():
            self.now_ms += timeout_ms
        return event.is_set()

    def monotonic_ms(self) -> int:
        return self.now_ms

    def close(self) -> None:
        self.closed = True
        self.cancel()

    @property
    def pending_ms(self) -> int | None:
        """When the pending call is due, or None."""
        return self._due_ms

    def advance(self, ms: int) -> int:
        """Move the clock by `ms`, firing the pending call (on this thread) each time it falls
        due, including calls armed by a call that fired; how many fired."""
        target = self.now_ms + ms
        fired = 0
        while self._due_ms is not None and self._due_ms <= target:
            self.now_ms = self._due_ms
            callback = self._callback
            self._due_ms = None
            self._callback = None
            if callback is not None:
                fired += 1
                callback()
        self.now_ms = target
        return fired
