"""Child processes for the journal ownership tests (`test_journal_lock.py`), started with "spawn".

They live in an importable module (not the test module) so that a spawned interpreter finds them.
"""

from __future__ import annotations

import os
import time
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path

from runners.worker.journal.lock import JournalOwnership, JournalOwnershipError

BARRIER_TIMEOUT_S = 20.0


def _try_acquire(owner: JournalOwnership) -> str:
    try:
        owner.acquire()
    except JournalOwnershipError as exc:
        return exc.code.value
    return "acquired"


def race_worker(
    root: str, index: int, rounds: int, barrier: Barrier, results: Queue[tuple[int, int, str]]
) -> None:
    """Each round: race for the lock at the barrier; the winner releases; the loser then acquires.

    Reports `(round, index, outcome)` for the race and `(round, index, "after:" + outcome)` for the
    loser's acquire after the release. Three barrier phases per round keep the processes in step
    with the parent (the third party), which checks the race outcomes between them.
    """
    owner = JournalOwnership(Path(root))
    for round_no in range(rounds):
        barrier.wait(BARRIER_TIMEOUT_S)  # 1: go
        outcome = _try_acquire(owner)
        results.put((round_no, index, outcome))
        barrier.wait(BARRIER_TIMEOUT_S)  # 2: the parent has both outcomes
        if outcome == "acquired":
            owner.release()
        barrier.wait(BARRIER_TIMEOUT_S)  # 3: the winner released
        if outcome != "acquired":
            after = _try_acquire(owner)
            results.put((round_no, index, f"after:{after}"))
            if after == "acquired":
                owner.release()
        barrier.wait(BARRIER_TIMEOUT_S)  # 4: the round is over


def crash_while_owning(root: str) -> None:
    """Acquire, then die without release and without any cleanup (like SIGKILL)."""
    JournalOwnership(Path(root)).acquire()
    os._exit(0)


def hold_until_killed(root: str, ready: Queue[int]) -> None:
    """Acquire with the default stale window, report this PID, then wait to be SIGKILLed."""
    JournalOwnership(Path(root)).acquire()
    ready.put(os.getpid())
    while True:
        time.sleep(3600)
