"""The local application's reads on the edge store (`runners/edge/sql/local.sql`): the live-stop
source of O-2 step 2, a Run's task revision, an Attempt's receipt and log cleanup facts (O-2
step 4). Each is one read-only statement on the store's one connection (FP-2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kernel import AttemptStatus, Candidate, Page, RunStatus, check_limit
from runners.edge.named_sql import load
from runners.edge.store import EdgeStore

__all__ = [
    "LOCAL",
    "attempt_finish",
    "attempt_sequence",
    "attempt_step_run",
    "deadline_candidates",
    "local_stop_candidates",
    "run_status_counts",
    "run_task",
    "task_attempt_task",
]

#: The named statements of `runners/edge/sql/local.sql`.
LOCAL: Final[Mapping[str, str]] = load("local.sql")


def _rows(store: EdgeStore, name: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    with store.authority.reading() as conn:
        return [tuple(row) for row in conn.execute(LOCAL[name], params).fetchall()]


def local_stop_candidates(store: EdgeStore, limit: int) -> Page[tuple[int, str]]:
    """One page of `kernel.local_stop_candidates` (no cursor: each cycle starts over, and a
    stopped Run leaves the source)."""
    check_limit(limit)
    rows = _rows(store, "local_stop_candidates", {"limit": limit})
    items = tuple(Candidate(str(r[0]), str(r[1]), (int(r[2]), str(r[0]))) for r in rows[:limit])
    return Page(items, has_more=len(rows) > limit)


def deadline_candidates(store: EdgeStore, now_ms: int, limit: int) -> Page[tuple[int, str]]:
    """One page of `kernel.deadline_candidates` (no cursor: a Run leaves the source once its
    `timeout` intent is recorded)."""
    check_limit(limit)
    rows = _rows(store, "deadline_candidates", {"now_ms": now_ms, "limit": limit})
    items = tuple(Candidate(str(r[0]), None, (int(r[1]), str(r[0]))) for r in rows[:limit])
    return Page(items, has_more=len(rows) > limit)


def run_task(store: EdgeStore, run_id: str) -> tuple[str, int] | None:
    """The `(task, revision)` the Run was admitted with."""
    rows = _rows(store, "run_task", {"run_id": run_id})
    return (str(rows[0][0]), int(rows[0][1])) if rows else None


def attempt_sequence(store: EdgeStore, attempt_id: str) -> tuple[AttemptStatus, int] | None:
    rows = _rows(store, "attempt_sequence", {"attempt_id": attempt_id})
    return (AttemptStatus(rows[0][0]), int(rows[0][1])) if rows else None


def attempt_finish(store: EdgeStore, attempt_id: str) -> tuple[AttemptStatus, int | None] | None:
    """The Attempt's `(status, finished_at_ms)`, or None when the database does not know it (log
    cleanup, O-2 step 4: the kernel's `log_cleanup_allowed` decides)."""
    rows = _rows(store, "attempt_finish", {"attempt_id": attempt_id})
    if not rows:
        return None
    status, finished = rows[0]
    return AttemptStatus(status), None if finished is None else int(finished)


def run_status_counts(store: EdgeStore) -> dict[RunStatus, int]:
    """Runs per status (statuses with no Run are absent)."""
    return {RunStatus(r[0]): int(r[1]) for r in _rows(store, "run_status_counts", {})}


def attempt_step_run(store: EdgeStore, attempt_id: str) -> tuple[bool, str | None]:
    """Whether the Attempt exists, and its `step_run_id` (None for an ordinary Attempt)."""
    rows = _rows(store, "attempt_step_run", {"attempt_id": attempt_id})
    if not rows:
        return False, None
    return True, None if rows[0][0] is None else str(rows[0][0])


def task_attempt_task(store: EdgeStore, attempt_id: str) -> tuple[str, int] | None:
    """The `(task, revision)` a Task Attempt's ledger entry pins (§4.1)."""
    rows = _rows(store, "task_attempt_task", {"attempt_id": attempt_id})
    return (str(rows[0][0]), int(rows[0][1])) if rows else None
