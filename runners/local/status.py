"""What `qlk status` and `qlk logs` read from the local application's database
(`runners/edge/sql/status.sql`; decision CLI-13).

No rule lives here and nothing is written: each function runs a few read-only named statements in
one read transaction (one committed state) and returns typed, frozen values; the CLI formats them.

- `overview(store, now_ms)`: Runs by status and, per source of work, its backlog and the time of
  its oldest item (`Backlog`): queued Runs waiting for dispatch, `retry_wait` Runs whose next
  Attempt is due, `lost` Runs waiting for the lost-retry decision, `running` Runs, Runs with a
  cancellation intent still to finish, and task schedules whose fire is due. Every count is
  bounded: at most `cap + 1` index entries are read, and a larger count is reported as `capped`
  (the oldest time is then the oldest among those read; see `sql/status.sql`).
- `run_detail(store, run_id)`: the Run, its Attempts and its Events (type, actor, time; no
  payloads, no token digests); for a Workflow Run (SPEC §4.1) also its admission and its StepRuns
  (`WorkflowView`, `StepRunView`), read in the same snapshot.
- `run_progress(store, run_id)`: the Run's status and latest Attempt (what `qlk logs --follow`
  polls).
"""

from __future__ import annotations

import enum
import json
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

from kernel import Actor, AttemptStatus, CancelReason, RunStatus
from kernel.specs import MAX_ATTEMPTS_MAX
from kernel.workflow import PLAN_STEPS_MAX, StepRunStatus
from runners.edge.named_sql import load
from runners.edge.store import EdgeStore

__all__ = [
    "COUNT_CAP",
    "EVENTS_MAX",
    "STATUS",
    "AttemptView",
    "Backlog",
    "BacklogSource",
    "EventView",
    "Overview",
    "RunDetail",
    "RunProgress",
    "RunView",
    "StatusCount",
    "StepRunView",
    "WorkflowView",
    "overview",
    "run_detail",
    "run_progress",
]

#: The named statements of `runners/edge/sql/status.sql`.
STATUS: Final[Mapping[str, str]] = load("status.sql")

#: A count stops after this many rows (then it is reported as more than this).
COUNT_CAP: Final = 100_000
#: At most this many Events of one Run are read (a Run has a few per Attempt; A-3 caps Attempts
#: at 16, so this is a guard, not a page).
EVENTS_MAX: Final = 1_000
#: A-3's limit on Attempts per Run, with room: the Attempt read's guard.
_ATTEMPTS_MAX: Final = 64
#: A Workflow Run's guard: every step (§4.1 plan limit) with A-3's maximum of Task Attempts.
_WORKFLOW_ATTEMPTS_MAX: Final = PLAN_STEPS_MAX * MAX_ATTEMPTS_MAX


class BacklogSource(enum.StrEnum):
    """The sources of work `overview` reports, in the order it reports them."""

    #: queued Runs without an intent, waiting for the dispatch phase
    DISPATCH = "dispatch"
    #: `retry_wait` Runs whose next Attempt is due
    RETRY_DUE = "retry_due"
    #: `lost` Runs without an intent, waiting for the lost-retry decision
    LOST = "lost"
    #: `running` Runs
    RUNNING = "running"
    #: non-terminal Runs with a cancellation intent
    CANCELLING = "cancelling"
    #: task schedules whose next fire is due
    SCHEDULE = "schedule"


_BACKLOG_STATEMENTS: Final[Mapping[BacklogSource, str]] = {
    BacklogSource.DISPATCH: "backlog_dispatch",
    BacklogSource.RETRY_DUE: "backlog_retry_due",
    BacklogSource.LOST: "backlog_lost",
    BacklogSource.RUNNING: "backlog_running",
    BacklogSource.CANCELLING: "backlog_cancelling",
    BacklogSource.SCHEDULE: "backlog_schedule",
}


@dataclass(frozen=True, slots=True)
class StatusCount:
    """How many Runs have `status` (`capped`: more than `count`)."""

    status: RunStatus
    count: int
    capped: bool


@dataclass(frozen=True, slots=True)
class Backlog:
    """One source's backlog: how many items (`capped`: more than `count`) and the time of the
    oldest (queued, due, lost, started, cancel requested; None when there is none)."""

    source: BacklogSource
    count: int
    capped: bool
    oldest_at_ms: int | None

    def oldest_age_ms(self, now_ms: int) -> int | None:
        """How long the oldest item has waited at `now_ms` (never negative)."""
        return None if self.oldest_at_ms is None else max(0, now_ms - self.oldest_at_ms)


@dataclass(frozen=True, slots=True)
class Overview:
    """Runs by status (every status, zero included) and the backlogs, read at `observed_at_ms`."""

    observed_at_ms: int
    cap: int
    counts: tuple[StatusCount, ...]
    backlogs: tuple[Backlog, ...]

    @property
    def total(self) -> int:
        return sum(c.count for c in self.counts)

    @property
    def capped(self) -> bool:
        return any(c.capped for c in self.counts)


@dataclass(frozen=True, slots=True)
class RunView:
    """A Run as `qlk status RUN` shows it (its task is `task_id` at `task_revision`)."""

    run_id: str
    status: RunStatus
    task_id: str
    task_revision: int
    created_at_ms: int
    updated_at_ms: int
    queued_at_ms: int | None
    started_at_ms: int | None
    finished_at_ms: int | None
    cancel_requested_at_ms: int | None
    cancel_reason: CancelReason | None
    error_code: str | None
    retry_of_run_id: str | None


@dataclass(frozen=True, slots=True)
class AttemptView:
    attempt_id: str
    number: int
    status: AttemptStatus
    created_at_ms: int
    started_at_ms: int | None
    finished_at_ms: int | None
    exit_code: int | None
    error_code: str | None


@dataclass(frozen=True, slots=True)
class EventView:
    seq: int
    type: str
    actor: Actor
    at_ms: int
    attempt_id: str | None
    code: str | None


@dataclass(frozen=True, slots=True)
class StepRunView:
    """One StepRun of a Workflow Run (SPEC §4.1): its status, its epoch (`version`, which
    every StepRun change increments), the Task it pins, its times and error code, and how many
    Task Attempts were admitted for it (`admitted`, at most `max_attempts`)."""

    step_key: str
    step_run_id: str
    status: StepRunStatus
    version: int
    task_id: str
    task_revision: int
    depends_on: tuple[str, ...]
    max_attempts: int
    admitted: int
    created_at_ms: int
    updated_at_ms: int
    ready_at_ms: int | None
    started_at_ms: int | None
    finished_at_ms: int | None
    error_code: str | None


@dataclass(frozen=True, slots=True)
class WorkflowView:
    """A Workflow Run's immutable admission (plan name and digest) and its StepRuns in plan
    order."""

    plan_name: str
    plan_digest: str
    admitted_at_ms: int
    steps: tuple[StepRunView, ...]


@dataclass(frozen=True, slots=True)
class RunDetail:
    """A Run, its Attempts by number, its first `EVENTS_MAX` Events by seq (`events_truncated`:
    there are more); `workflow` is set for a Workflow Run (SPEC §4.1), None for an ordinary one."""

    run: RunView
    attempts: tuple[AttemptView, ...]
    events: tuple[EventView, ...]
    events_truncated: bool
    workflow: WorkflowView | None = None

    @property
    def latest_attempt(self) -> AttemptView | None:
        return self.attempts[-1] if self.attempts else None


@dataclass(frozen=True, slots=True)
class RunProgress:
    """A Run's status and its latest Attempt (None: it has none)."""

    run_id: str
    status: RunStatus
    latest_attempt_id: str | None

    @property
    def terminal(self) -> bool:
        return self.status.terminal


@contextmanager
def _snapshot(store: EdgeStore) -> Iterator[sqlite3.Connection]:
    """The store's connection inside one read transaction (one committed state)."""
    with store.authority.reading() as conn:
        conn.execute(STATUS["begin_read"])
        try:
            yield conn
        finally:
            if conn.in_transaction:
                conn.execute(STATUS["end_read"])


def _rows(conn: sqlite3.Connection, name: str, params: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in conn.execute(STATUS[name], params).fetchall()]


def overview(store: EdgeStore, now_ms: int, *, cap: int = COUNT_CAP) -> Overview:
    """Runs by status and the backlog of every `BacklogSource` at `now_ms` (see the module)."""
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ValueError("cap: must be an integer >= 1")
    params = {"cap": cap, "now_ms": now_ms}
    with _snapshot(store) as conn:
        counted = {str(s): int(n) for s, n in _rows(conn, "run_counts", {"cap": cap})}
        backlogs = []
        for source, statement in _BACKLOG_STATEMENTS.items():
            ((count, oldest),) = _rows(conn, statement, params)
            backlogs.append(
                Backlog(
                    source,
                    min(int(count), cap),
                    int(count) > cap,
                    None if oldest is None else int(oldest),
                )
            )
    counts = tuple(
        StatusCount(
            status, min(counted.get(status.value, 0), cap), counted.get(status.value, 0) > cap
        )
        for status in RunStatus
    )
    return Overview(now_ms, cap, counts, tuple(backlogs))


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _run(row: tuple[Any, ...]) -> RunView:
    (run_id, status, task_id, revision, created, updated, queued, started, finished) = row[:9]
    (cancel_at, cancel_reason, error_code, retry_of) = row[9:]
    return RunView(
        run_id=str(run_id),
        status=RunStatus(status),
        task_id=str(task_id),
        task_revision=int(revision),
        created_at_ms=int(created),
        updated_at_ms=int(updated),
        queued_at_ms=_optional_int(queued),
        started_at_ms=_optional_int(started),
        finished_at_ms=_optional_int(finished),
        cancel_requested_at_ms=_optional_int(cancel_at),
        cancel_reason=None if cancel_reason is None else CancelReason(cancel_reason),
        error_code=None if error_code is None else str(error_code),
        retry_of_run_id=None if retry_of is None else str(retry_of),
    )


def _attempt(row: tuple[Any, ...]) -> AttemptView:
    attempt_id, number, status, created, started, finished, exit_code, error_code = row
    return AttemptView(
        attempt_id=str(attempt_id),
        number=int(number),
        status=AttemptStatus(status),
        created_at_ms=int(created),
        started_at_ms=_optional_int(started),
        finished_at_ms=_optional_int(finished),
        exit_code=_optional_int(exit_code),
        error_code=None if error_code is None else str(error_code),
    )


def _event(row: tuple[Any, ...]) -> EventView:
    seq, type_, actor, at_ms, attempt_id, code = row
    return EventView(
        seq=int(seq),
        type=str(type_),
        actor=Actor(actor),
        at_ms=int(at_ms),
        attempt_id=None if attempt_id is None else str(attempt_id),
        code=None if code is None else str(code),
    )


def _step_run(row: tuple[Any, ...]) -> StepRunView:
    (key, step_run_id, status, version, task_id, revision, depends_on, max_attempts) = row[:8]
    (created, updated, ready, started, finished, error_code, admitted) = row[8:]
    return StepRunView(
        step_key=str(key),
        step_run_id=str(step_run_id),
        status=StepRunStatus(status),
        version=int(version),
        task_id=str(task_id),
        task_revision=int(revision),
        depends_on=tuple(str(k) for k in json.loads(depends_on)),
        max_attempts=int(max_attempts),
        admitted=int(admitted),
        created_at_ms=int(created),
        updated_at_ms=int(updated),
        ready_at_ms=_optional_int(ready),
        started_at_ms=_optional_int(started),
        finished_at_ms=_optional_int(finished),
        error_code=None if error_code is None else str(error_code),
    )


def _workflow(conn: sqlite3.Connection, key: Mapping[str, Any]) -> WorkflowView | None:
    """The Workflow admission and StepRuns of the Run in `key`, None for an ordinary Run."""
    found = _rows(conn, "workflow_admission", key)
    if not found:
        return None
    plan_name, plan_digest, _count, admitted_at = found[0]
    steps = _rows(conn, "workflow_step_runs", {**key, "limit": PLAN_STEPS_MAX})
    return WorkflowView(
        plan_name=str(plan_name),
        plan_digest=str(plan_digest),
        admitted_at_ms=int(admitted_at),
        steps=tuple(_step_run(row) for row in steps),
    )


def run_detail(
    store: EdgeStore, run_id: str, *, events_limit: int = EVENTS_MAX
) -> RunDetail | None:
    """The Run `run_id` with its Attempts and Events (and, for a Workflow Run, its admission
    and StepRuns), or None when there is no such Run."""
    if isinstance(events_limit, bool) or not isinstance(events_limit, int) or events_limit < 1:
        raise ValueError("events_limit: must be an integer >= 1")
    key = {"run_id": run_id}
    with _snapshot(store) as conn:
        found = _rows(conn, "run_detail", key)
        if not found:
            return None
        workflow = _workflow(conn, key)
        # A Workflow's Attempts are its steps' Task Attempts: up to 64 steps of up to 16 each.
        limit = _ATTEMPTS_MAX if workflow is None else _WORKFLOW_ATTEMPTS_MAX
        attempts = _rows(conn, "run_attempts", {**key, "limit": limit})
        events = _rows(conn, "run_events", {**key, "limit": events_limit + 1})
    return RunDetail(
        run=_run(found[0]),
        attempts=tuple(_attempt(row) for row in attempts),
        events=tuple(_event(row) for row in events[:events_limit]),
        events_truncated=len(events) > events_limit,
        workflow=workflow,
    )


def run_progress(store: EdgeStore, run_id: str) -> RunProgress | None:
    """The Run's status and latest Attempt id, or None when there is no such Run."""
    with _snapshot(store) as conn:
        found = _rows(conn, "run_progress", {"run_id": run_id})
    if not found:
        return None
    status, latest = found[0]
    return RunProgress(run_id, RunStatus(status), None if latest is None else str(latest))
