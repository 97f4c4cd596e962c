"""`InFlight`: one operation per offer in one process (SPEC §3.5 "concurrent duplicate
deliveries join the same in-flight operation", §3.12, §3.15; decision WR-5)."""

from __future__ import annotations

import threading

import pytest

from runners.worker.in_flight import InFlight


def _race(
    inflight: InFlight[str, int], tags: list[str], gate: threading.Event
) -> list[tuple[str, object]]:
    calls: list[str] = []
    results: list[tuple[str, object]] = []

    def operation(tag: str) -> int:
        calls.append(tag)
        gate.wait(5)
        return len(calls)

    def caller(tag: str) -> None:
        results.append((tag, inflight.run("offer", tag, lambda: operation(tag))))

    threads = [threading.Thread(target=caller, args=(tag,)) for tag in tags]
    threads[0].start()
    while not inflight.active("offer"):
        pass
    for thread in threads[1:]:
        thread.start()
    gate.set()
    for thread in threads:
        thread.join(10)
    results.append(("calls", calls))
    return results


@pytest.mark.spec("INBOX-04")
def test_equal_callers_join_one_operation() -> None:
    """INBOX-04: six concurrent callers with the same tag run the operation once and all get
    its result."""
    results = _race(InFlight(), ["a"] * 6, threading.Event())
    assert results[-1] == ("calls", ["a"])
    assert results[:-1] == [("a", 1)] * 6


def test_a_different_caller_runs_after_the_one_in_flight() -> None:
    """WR-5: a caller with another tag (a newer lease) waits, then runs its own operation."""
    results = _race(InFlight(), ["a", "b"], threading.Event())
    assert results[-1] == ("calls", ["a", "b"])
    assert ("b", 2) in results


def test_try_run_never_waits_and_an_exception_reaches_the_joiners() -> None:
    """`try_run` answers None while the key is busy; an operation's exception is raised to
    callers that joined it, and the key is free afterwards."""
    inflight: InFlight[str, int] = InFlight()
    gate = threading.Event()
    seen: list[object] = []

    def failing() -> int:
        gate.wait(5)
        raise RuntimeError("boom")

    def first() -> None:
        try:
            inflight.run("k", "t", failing)
        except RuntimeError as exc:
            seen.append(str(exc))

    thread = threading.Thread(target=first)
    thread.start()
    while not inflight.active("k"):
        pass
    assert inflight.try_run("k", "t", lambda: 1) is None
    joiner = threading.Thread(target=first)
    joiner.start()
    gate.set()
    thread.join(10)
    joiner.join(10)
    assert seen == ["boom", "boom"]
    assert not inflight.active("k")
    assert inflight.try_run("k", "t", lambda: 7) == 7
