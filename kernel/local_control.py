"""The local execution-control decisions that are not single transitions (SPEC §1.7 L4/L5, §1.9,
§2.2, Appendix D-1; ADR-0380 §3, O-2).

- `local_stop_candidates`: the selection oracle of the "stop a live process first" source (O-2
  step 2, L4/L5): runtime ordinary `running` Runs with a cancellation intent whose latest Attempt
  is a local Attempt `running` under a recorded handle, keyset `(cancel_requested_at_ms, run_id)`.
  (A Run with an intent and no live execution is `cancel_convergence_candidates`' instead.) The
  edge runner's SQL is checked against it.
- `deadline_candidates`: the selection oracle of deadline control (O-2 step 2, B-06): runtime
  ordinary `dispatching`/`running` Runs without an intent whose task revision has a deadline
  that passed since the Run started, keyset `(started_at_ms + deadline_ms, run_id)`; each gets a
  `timeout` intent, which the same step then stops (L4) or converges.
- `receipt_cleanup_allowed`: D-1 / CAD-15: a slow-cycle cleanup deletes a receipt only when its
  Attempt is terminal in the database with an equal callback sequence.
- `log_cleanup_allowed`: CAD-02 / D-1 [decision LR-13]: a slow-cycle cleanup deletes an Attempt's
  log only when the Attempt is terminal in the database and ended at least the retention ago.
- `launch_identity`: D-1, LR-9: the identity a local Attempt is inspected by (the recorded
  handle, else the launcher's journaled identity), or a trusted not-running report when neither
  exists (the command is only sent once the identity is durable).
- `watched_after_startup`: which startup outcomes leave the Attempt watched for its receipt.
- `startup_budget_exhausted`: D-11: more candidates than the startup total refuses startup
  before any write.
- `local_idle`: `qlk serve --until-idle` (issue 15 item 4): nothing queued, running, lost,
  waiting for retry or due, and no process watched.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol

import icontract

from kernel.entities import Attempt, RunAggregate
from kernel.evidence import Inspection
from kernel.selection import Candidate, Page, _page
from kernel.specs.codes import Code
from kernel.specs.states import AttemptStatus, RunKind, RunOwner, RunStatus

__all__ = [
    "deadline_candidates",
    "launch_identity",
    "local_idle",
    "local_stop_candidates",
    "log_cleanup_allowed",
    "receipt_cleanup_allowed",
    "startup_budget_exhausted",
    "watched_after_startup",
]


def local_stop_candidates(
    aggregates: Iterable[RunAggregate], limit: int, after: tuple[int, str] | None = None
) -> Page[tuple[int, str]]:
    """O-2 step 2 (L4/L5): live local executions a cancellation or timeout intent must stop."""

    def select(agg: RunAggregate) -> Candidate[tuple[int, str]] | None:
        run = agg.run
        latest = agg.latest_attempt
        if (
            run.owner is RunOwner.RUNTIME
            and run.kind is RunKind.ORDINARY
            and run.status is RunStatus.RUNNING
            and run.cancel_requested_at_ms is not None
            and latest is not None
            and latest.status is AttemptStatus.RUNNING
            and latest.is_local
            and latest.executor_handle is not None
        ):
            return Candidate(
                run.run_id, latest.attempt_id, (run.cancel_requested_at_ms, run.run_id)
            )
        return None

    return _page(aggregates, select, limit, after)


def deadline_candidates(
    runs: Iterable[tuple[RunAggregate, int | None]], now_ms: int, limit: int
) -> Page[tuple[int, str]]:
    """O-2 step 2 (B-06): `(aggregate, deadline_ms of its task revision)` pairs whose deadline
    passed at `now_ms` and that have no intent yet; no cursor (a Run leaves the source once its
    intent is recorded)."""
    pairs = list(runs)
    deadlines = {agg.run.run_id: deadline for agg, deadline in pairs}

    def select(agg: RunAggregate) -> Candidate[tuple[int, str]] | None:
        run = agg.run
        deadline = deadlines.get(run.run_id)
        if (
            run.owner is RunOwner.RUNTIME
            and run.kind is RunKind.ORDINARY
            and run.status in _DEADLINE_STATUSES
            and run.cancel_requested_at_ms is None
            and run.started_at_ms is not None
            and deadline is not None
            and run.started_at_ms + deadline <= now_ms
        ):
            return Candidate(run.run_id, None, (run.started_at_ms + deadline, run.run_id))
        return None

    return _page((agg for agg, _ in pairs), select, limit, None)


#: B-06: a deadline runs from the Run's start; a Run not started yet has nothing to time out.
_DEADLINE_STATUSES = frozenset({RunStatus.DISPATCHING, RunStatus.RUNNING})


def receipt_cleanup_allowed(
    attempt_status: AttemptStatus | None,
    attempt_callback_sequence: int | None,
    receipt_callback_sequence: int,
) -> bool:
    """D-1, CAD-15: only a terminal Attempt's receipt, with the same callback sequence (an
    Attempt the database does not know keeps its receipt: nothing proves it is settled)."""
    return (
        attempt_status is not None
        and attempt_status.terminal
        and attempt_callback_sequence == receipt_callback_sequence
    )


@icontract.require(lambda retention_ms: retention_ms >= 0, "a retention is not negative")
@icontract.ensure(
    lambda attempt_status, result: (
        not result or (attempt_status is not None and attempt_status.terminal)
    ),
    "only a terminal Attempt's log is deleted (fail closed)",
)
@icontract.ensure(
    lambda finished_at_ms, now_ms, retention_ms, result: (
        not result or (finished_at_ms is not None and now_ms - finished_at_ms >= retention_ms)
    ),
    "only a log whose Attempt ended at least the retention ago is deleted",
)
def log_cleanup_allowed(
    attempt_status: AttemptStatus | None,
    finished_at_ms: int | None,
    now_ms: int,
    retention_ms: int,
) -> bool:
    """CAD-02 / D-1 (O-2 step 4, "only on slow cycles, receipt and log cleanup") [decision
    LR-13]: whether slow-cycle cleanup may delete an Attempt's log.

    Only when the Attempt is terminal in the database (I-5, `lost` included: nothing will write
    the log again) and ended (`finished_at_ms`) at least `retention_ms` before `now_ms`. Fail
    closed: a non-terminal Attempt's log (`claimed`, `starting`, `running`: its process may be
    writing it, `qlk logs --follow` may be reading it) is never deleted, whatever its age; nor is
    a terminal Attempt's without an end time, nor one the database does not know (an orphan: the
    launcher spawns only after L1 committed and the local store never deletes an Attempt, so an
    orphan log comes from another or a restored database, whose process may still be writing it;
    nothing proves it settled, as for `receipt_cleanup_allowed`). A clock that went back (the end
    after `now_ms`) keeps the log."""
    return (
        attempt_status is not None
        and attempt_status.terminal
        and finished_at_ms is not None
        and now_ms - finished_at_ms >= retention_ms
    )


def launch_identity(attempt: Attempt, journaled: str | None) -> str | Inspection:
    """§2.1 step 2 and D-1 for a local Attempt [decision LR-9]: the identity recovery inspects.

    The recorded handle (L2) when there is one; else the identity the launcher journaled after
    the wrapper existed and before it was told what to run (the executor sends the command only
    once that line is durable); else nothing ever ran: a trusted not-running report. Without a
    handle fact a `running` Attempt is inconsistent with L2 and reports `handle_missing`."""
    if attempt.executor_handle is not None:
        return attempt.executor_handle
    if journaled is not None:
        return journaled
    if attempt.status is AttemptStatus.STARTING:
        return Inspection.NOT_RUNNING
    return Inspection.HANDLE_MISSING


def startup_budget_exhausted(candidates_counted: int, total_per_startup: int) -> bool:
    """D-11: the count (of at most `total + 1`) exceeds the per-startup total."""
    return candidates_counted > total_per_startup


#: Startup outcomes after which execution control watches the Attempt for its receipt: `live`
#: (§2.1 adoption). A start whose handle fact (L2) was lost to a crash is inspected by its
#: journaled identity (LR-9, superseding LR-6), so it is `live`, completed or `lost`, never
#: `handle_missing`; an `unknown` outcome is reported and left (fail closed).
_WATCHED_AFTER_STARTUP = frozenset({Code.LIVE})


class Coded(Protocol):
    """Any kernel outcome (a Run's or a Workflow's): it has a code."""

    @property
    def code(self) -> Code: ...


def watched_after_startup(outcome: Coded) -> bool:
    """§2.1, D-1: whether execution control keeps watching the candidate for its receipt."""
    return outcome.code in _WATCHED_AFTER_STARTUP


def local_idle(
    run_counts: Mapping[RunStatus, int], due_schedules: int, watched: int, due_actions: int = 0
) -> bool:
    """Issue 15 item 4 (`--until-idle`): no Run in a non-terminal status (queued, dispatching,
    running, lost, retry_wait, created), no schedule due, no process the launcher watches, and
    (issue 19) no approved action due for dispatch or recovery."""
    unsettled = sum(count for status, count in run_counts.items() if not status.terminal)
    return unsettled == 0 and due_schedules == 0 and watched == 0 and due_actions == 0
