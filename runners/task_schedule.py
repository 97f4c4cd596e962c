"""The trigger-schedule phase and task submissions of both runners (O-3 "schedule" on edge and
standalone, O-5 phase 3 on cluster; issue 15 item 3, issue 17 item 1; decisions TK-6..TK-13).

No rule lives here: the kernel (`kernel.task`) decides which fires to admit, with which ids, and
what the bookkeeping becomes; croniter (`runners.cron`) iterates the cron expressions; the
engine (`runners.engine.execute`) admits each Run through the kernel's `admit_run` on any
`runners.engine.Storage`; a `runners.task_rows.TaskStore` persists (`runners.edge.tasks` on the
SQLite file, `runners.cluster.tasks` on PostgreSQL). Outcomes are told apart by the kernel's
`OutcomeKind` only. `runners.local.schedule` re-exports this module under its old name.

`schedule_phase(store, tasks, now_ms, budget)` runs one cycle:
1. the due scan reads at most `budget.max_items` schedule rows (`budget`: the profile's
   `scheduler_trigger_schedule`, TK-13);
2. for each, croniter finds the latest cron time <= `now_ms` (UTC); `decide_fires` picks the
   fires (a claimed fire is resumed; otherwise only the latest missed fire; TK-10);
3. each fire is claimed (a compare-and-set on the bookkeeping; a lost claim is skipped),
   admitted with its deterministic Run and Attempt ids (TK-6), and its outcome recorded: applied
   or an exact replay as admitted, rejected as refused, raced left claimed for the next cycle.
A crash between any two steps, or a second scheduler on the same database (another process on
the file, another cluster replica), never admits a fire twice: the claim is a compare-and-set, and
a fire's Run id is deterministic (TK-6), so a second admission of it is an exact replay or a race,
never a second Run (see `kernel.task.schedule`). The steps are public (`plan_cycle`, `claim`,
`admit`, `record`) so tests can stop between them.

`submit(store, tasks, name, now_ms=, run_id=, attempt_id=)` admits a manual Run of a task's current
revision (TK-8); `submit_command(...)` does the same for an ad-hoc command through its implicit
task (TK-5). The ids are the caller's (the CLI draws them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

from kernel import Outcome
from kernel.approved_action import ActionOutcome, RequestApproval
from kernel.specs import OutcomeKind, Paging
from kernel.task import (
    FireKind,
    FirePlan,
    Refresh,
    ScheduleCandidate,
    SchedulePlan,
    ScheduleState,
    TaskRefused,
    adhoc_definition,
    claim_fire,
    decide_fires,
    fire_command,
    refreshed_schedule,
    request_submission,
    resolve_fire,
    resolved_schedule,
)
from runners.cron import first_fire_after, latest_fire_at_or_before
from runners.engine import ActionStorage, Storage, execute, execute_action
from runners.task_rows import DueSchedule, TaskStore

__all__ = [
    "CyclePlan",
    "FireReport",
    "SchedulePhaseReport",
    "admit",
    "claim",
    "plan_cycle",
    "record",
    "refresh",
    "schedule_phase",
    "submit",
    "submit_command",
]


@dataclass(frozen=True, slots=True)
class CyclePlan:
    """The kernel's plan for one cycle and the due rows it was decided on, by task."""

    now_ms: int
    plan: SchedulePlan
    due: Mapping[str, DueSchedule]


@dataclass(frozen=True, slots=True)
class FireReport:
    """One planned fire: whether this scheduler held its claim (False: another writer changed
    the bookkeeping first, nothing was admitted), the admission's outcome, and whether the
    outcome was recorded (False for a raced admission or a lost resolution: the claim stays and
    the next cycle resumes it)."""

    plan: FirePlan
    claimed: bool
    outcome: Outcome | None
    recorded: bool


@dataclass(frozen=True, slots=True)
class SchedulePhaseReport:
    """What one cycle did. `due`: schedule rows read (<= the budget); `refreshed`: due rows whose
    next due time was only recomputed."""

    now_ms: int
    due: int
    fires: tuple[FireReport, ...]
    refreshed: int

    def _of(self, kind: OutcomeKind) -> tuple[FireReport, ...]:
        return tuple(f for f in self.fires if f.outcome is not None and f.outcome.kind is kind)

    @property
    def admitted(self) -> tuple[FireReport, ...]:
        """Fires whose Run this cycle created."""
        return self._of(OutcomeKind.APPLIED)

    @property
    def replayed(self) -> tuple[FireReport, ...]:
        """Resumed fires whose Run already existed (a crash after its admission)."""
        return self._of(OutcomeKind.REPLAYED)

    @property
    def refused(self) -> tuple[FireReport, ...]:
        return self._of(OutcomeKind.REJECTED)


# -- the steps -------------------------------------------------------------------------------------


def plan_cycle(tasks: TaskStore, now_ms: int, budget: Paging) -> CyclePlan:
    """Steps 1-2: the due scan, croniter's latest fire per row, the kernel's plan."""
    due = tasks.due(now_ms, budget)
    candidates = [
        ScheduleCandidate(
            row.state,
            row.current_revision,
            None if row.state.cron is None else latest_fire_at_or_before(row.state.cron, now_ms),
        )
        for row in due
    ]
    plan = decide_fires(candidates, budget.max_items)
    return CyclePlan(now_ms, plan, {row.state.task: row for row in due})


def claim(tasks: TaskStore, cycle: CyclePlan, fire: FirePlan) -> ScheduleState | None:
    """Step 3a: the bookkeeping row the fire is admitted under, claimed for a `NEW` fire (None:
    the claim was lost to a concurrent writer; skip the fire), as read for a `RESUME`."""
    state = cycle.due[fire.task].state
    if fire.kind is FireKind.RESUME:
        return state
    claimed = claim_fire(state, fire)
    return claimed if tasks.write_schedule(claimed, fire.expected_version) else None


def admit(store: Storage, tasks: TaskStore, fire: FirePlan, now_ms: int) -> Outcome:
    """Step 3b: admit the fire through the engine with its deterministic ids (A-1..A-5)."""
    revision = tasks.revision(fire.task, fire.revision)
    if revision is None:
        # Revisions are never deleted: a claimed fire always has its revision.
        raise LookupError(f"task revision {fire.task!r}/{fire.revision} is missing")
    return execute(store, fire_command(fire, revision), now_ms)


def record(tasks: TaskStore, claimed: ScheduleState, fire: FirePlan, outcome: Outcome) -> bool:
    """Step 3c: record the admission's outcome (by its kind; TK-6). False: nothing recorded
    (a raced admission, or the row changed since the claim); the next cycle resumes the fire."""
    resolution = resolve_fire(fire, claimed.since_ms, outcome)
    if resolution is None:
        return False
    cron = claimed.cron
    next_due = None if cron is None else first_fire_after(cron, resolution.anchor_ms)
    updated = resolved_schedule(claimed, resolution, next_due)
    return tasks.write_schedule(updated, resolution.expected_version)


def refresh(tasks: TaskStore, cycle: CyclePlan, item: Refresh) -> bool:
    """A due row with nothing to fire: recompute its next due time (False: it changed)."""
    state = cycle.due[item.task].state
    next_due = None if state.cron is None else first_fire_after(state.cron, item.anchor_ms)
    return tasks.write_schedule(refreshed_schedule(state, item, next_due), item.expected_version)


# -- the phase -------------------------------------------------------------------------------------


def schedule_phase(
    store: Storage, tasks: TaskStore, now_ms: int, budget: Paging
) -> SchedulePhaseReport:
    """One trigger-schedule cycle at `now_ms` within `budget` (see the module docstring).
    On edge `tasks` must be built on `store` (one connection, FP-2); on cluster both are on one
    schema and `now_ms` is the database's time (ADR-0232 §1). Storage errors propagate: the
    lifecycle fails the cycle and the next cadence retries (every step is resumable)."""
    cycle = plan_cycle(tasks, now_ms, budget)
    reports: list[FireReport] = []
    for fire in cycle.plan.fires:
        claimed = claim(tasks, cycle, fire)
        if claimed is None:
            reports.append(FireReport(fire, claimed=False, outcome=None, recorded=False))
            continue
        outcome = admit(store, tasks, fire, now_ms)
        recorded = record(tasks, claimed, fire, outcome)
        reports.append(FireReport(fire, claimed=True, outcome=outcome, recorded=recorded))
    refreshed = sum(refresh(tasks, cycle, item) for item in cycle.plan.refreshes)
    return SchedulePhaseReport(now_ms, len(cycle.due), tuple(reports), refreshed)


# -- manual submissions ----------------------------------------------------------------------------


def submit(
    store: Storage,
    tasks: TaskStore,
    task_name: str,
    *,
    now_ms: int,
    run_id: str,
    attempt_id: str,
    requested_by: str = "user",
) -> Outcome | ActionOutcome | TaskRefused:
    """`qlk submit TASK`: a manual Run of the task's current revision (TK-8), or the refusal
    (`TASK_NOT_FOUND`, `TASK_REMOVED`). The admission's outcome is the kernel's: `Applied`, or
    `Replayed` when the same ids are submitted again, or `Rejected` (e.g. `RUN_ID_CONFLICT`).
    For a task that requires approval the kernel makes it an approval request instead (issue
    19; `kernel.task.request_submission`), asked by `requested_by`, whose outcome is returned:
    `store` must then be the edge store (`runners.engine.ActionStorage`)."""
    decision = request_submission(
        tasks.state(task_name), run_id, attempt_id, requested_by=requested_by
    )
    if isinstance(decision, TaskRefused):
        return decision
    if isinstance(decision, RequestApproval):
        return execute_action(cast(ActionStorage, store), decision, now_ms)
    return execute(store, decision, now_ms)


def submit_command(
    store: Storage,
    tasks: TaskStore,
    argv: Sequence[str],
    *,
    now_ms: int,
    run_id: str,
    attempt_id: str,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    deadline_ms: int | None = None,
) -> Outcome | ActionOutcome | TaskRefused:
    """`qlk submit -- CMD ARGS`: the command's implicit task (`adhoc:<16 hex>`, TK-5) is written
    if new (revision 1; the same command is the same task), then submitted like a task."""
    definition = adhoc_definition(argv, cwd=cwd, env=env, deadline_ms=deadline_ms)
    if isinstance(definition, TaskRefused):
        return definition
    written = tasks.add(definition, now_ms)
    if isinstance(written, TaskRefused):
        return written
    return submit(
        store, tasks, definition.name, now_ms=now_ms, run_id=run_id, attempt_id=attempt_id
    )
