"""The schedule phase's decisions (issue 15 item 3; decisions TK-6, TK-9..TK-13).

Pure: cron iteration is the runner's (croniter, UTC), which passes the times it found in; the
kernel decides which fires to admit, with which ids, and what the bookkeeping becomes.

Bookkeeping (`ScheduleState`, one per task with a schedule)
------------------------------------------------------------
- `cron`: the 5-field expression the schedule currently follows (None: no schedule any more).
- `since_ms`: when this schedule took effect (the task was added, its cron changed, or it was
  re-added after removal). [decision TK-9] A fire is admitted only if it is *after* `since_ms`:
  a new task's first fire is the first cron time after it was added, never one from before it
  existed; the same holds after a cron edit and after a re-add.
- `last_fire`: the latest fire this schedule claimed, with its revision and state:
  `claimed` (written *before* its admission), `admitted` (the admission was applied or found as
  an exact replay), `refused` (the admission was rejected: the fire is skipped, its code kept),
  `abandoned` (the task was removed, or its schedule dropped, while the fire was claimed: it was
  admitted or not, and is never retried).
- `next_due_ms`: when the schedule next needs the phase: the first cron time after
  `anchor_ms = max(since_ms, last fire)`, or the claimed fire itself while it is claimed; None
  when there is nothing to do (no cron, or removed). The due scan reads rows with
  `next_due_ms <= now` in `(next_due_ms, task)` order, at most the phase budget per cycle.
- `version`: the compare-and-set of every write. Any edit or removal of the task bumps it, so a
  claim decided on a stale read is refused by the store, never written.

One cycle (`decide_fires`)
--------------------------
For each due row (with the task's current revision and the latest cron time <= now):
1. a `claimed` fire is resumed first (`RESUME`): the same `(task, revision, fire)`, hence the same
   deterministic ids (TK-6); if the crash came after its admission, the admission is now an exact
   replay and is recorded as admitted (`resolve_fire`, by the outcome's kind);
2. otherwise, [decision TK-10] *only the latest* cron time <= now is admitted (`NEW`, with the
   current revision), if it is after the anchor: fires missed while the process was down (or
   while the phase was over budget) collapse into that one; the earlier ones are never admitted;
3. otherwise the row was due on a stale read: `Refresh` recomputes its `next_due_ms`.
Fires come first, resumed ones before new ones, then by fire time, then task name (oldest work
first, a stable total order); refreshes follow; the whole plan holds at most `budget` items
(CAD-12 for the trigger-schedule row of the budget table, TK-13).

A fire's life: `claim_fire` (CAS on the version read) -> the engine's `admit_run` with
`admit_command` -> `resolve_fire` (CAS on the claim's version). A crash anywhere leaves either no
claim (the fire is decided again), or a claim (resumed next cycle, its admission applied once or
replayed), or the resolution. Two schedulers on one file race on the claim's CAS; the loser
skips, or resumes the winner's claim and meets its Run as an exact replay. A fire is never
admitted twice.

Edits and removal
-----------------
- [decision TK-11] A new revision with the *same* cron keeps the schedule as it is: its next
  fire is admitted with the new revision; a revision with a *changed* cron (or a cron added, or
  a re-add after removal) restarts the schedule at the revision's time (`since_ms`), with a
  still-claimed fire resumed first. A revision without a cron drops the schedule (`next_due_ms`
  None), abandoning a claimed fire.
- [decision TK-12] Removal drops the schedule the same way; the row stays for `qlk task list`.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace

import icontract

from kernel.commands import AdmitRun
from kernel.outcomes import Outcome
from kernel.specs.codes import Code
from kernel.specs.states import Actor, OutcomeKind
from kernel.task.catalog import TaskRevised, admit_command
from kernel.task.definition import TaskRevision
from kernel.task.fire_ids import fire_attempt_id, fire_run_id

__all__ = [
    "FireKind",
    "FirePlan",
    "FireRecord",
    "FireResolution",
    "FireState",
    "Refresh",
    "ScheduleCandidate",
    "SchedulePlan",
    "ScheduleState",
    "claim_fire",
    "decide_fires",
    "fire_command",
    "refreshed_schedule",
    "resolve_fire",
    "resolved_schedule",
    "schedule_after_removal",
    "schedule_after_revision",
]


class FireState(enum.StrEnum):
    """The state of a schedule's latest fire (see the module docstring)."""

    CLAIMED = "claimed"
    ADMITTED = "admitted"
    REFUSED = "refused"
    ABANDONED = "abandoned"


class FireKind(enum.StrEnum):
    NEW = "new"  # claim, then admit
    RESUME = "resume"  # already claimed: admit again (applied once or an exact replay)


@dataclass(frozen=True, slots=True)
class FireRecord:
    """A schedule's latest fire: its cron time, the revision it is admitted with, its state, and
    the rejection code of a `refused` one."""

    fire_at_ms: int
    revision: int
    state: FireState
    code: Code | None = None


@dataclass(frozen=True, slots=True)
class ScheduleState:
    """The bookkeeping row of one task's schedule (see the module docstring)."""

    task: str
    cron: str | None
    since_ms: int
    next_due_ms: int | None
    last_fire: FireRecord | None
    version: int

    @property
    def anchor_ms(self) -> int:
        """Fires at or before this time are never admitted (again): TK-9, TK-10."""
        if self.last_fire is None:
            return self.since_ms
        return max(self.since_ms, self.last_fire.fire_at_ms)


@dataclass(frozen=True, slots=True)
class ScheduleCandidate:
    """One due row as the phase read it: the bookkeeping, the task's current revision, and the
    latest cron time <= now of `state.cron` (croniter, UTC; None if there is none)."""

    state: ScheduleState
    current_revision: int
    latest_fire_ms: int | None


@dataclass(frozen=True, slots=True)
class FirePlan:
    """One fire to admit this cycle, with its deterministic ids (TK-6). `expected_version` is the
    bookkeeping version the decision was made on."""

    task: str
    revision: int
    fire_at_ms: int
    kind: FireKind
    expected_version: int
    run_id: str
    attempt_id: str


@dataclass(frozen=True, slots=True)
class Refresh:
    """A due row with nothing to fire: set its `next_due_ms` to the first cron time after
    `anchor_ms` (where its version is still `expected_version`)."""

    task: str
    expected_version: int
    anchor_ms: int


@dataclass(frozen=True, slots=True)
class SchedulePlan:
    fires: tuple[FirePlan, ...]
    refreshes: tuple[Refresh, ...]


@dataclass(frozen=True, slots=True)
class FireResolution:
    """What a fire's admission outcome makes of the bookkeeping: write `record` and set
    `next_due_ms` to the first cron time after `anchor_ms`, where the version is still
    `expected_version` (the claim's)."""

    task: str
    expected_version: int
    record: FireRecord
    anchor_ms: int


# -- edits and removal ---------------------------------------------------------------------------


def _abandon(fire: FireRecord | None) -> FireRecord | None:
    if fire is not None and fire.state is FireState.CLAIMED:
        return replace(fire, state=FireState.ABANDONED)
    return fire


def schedule_after_revision(
    previous: ScheduleState | None, revised: TaskRevised, first_fire_after_ms: int | None
) -> ScheduleState | None:
    """The bookkeeping after a new revision (TK-9, TK-11); None: write nothing.

    `first_fire_after_ms` is the first cron time of the new revision's cron strictly after the
    revision's time (`revised.revision.created_at_ms`), computed by the runner; None iff the
    revision has no cron."""
    revision = revised.revision
    cron = revision.cron
    now = revision.created_at_ms
    if previous is None:
        if cron is None:
            return None
        return ScheduleState(revision.name, cron, now, first_fire_after_ms, None, 1)
    version = previous.version + 1
    if cron is None:
        return replace(
            previous,
            cron=None,
            next_due_ms=None,
            last_fire=_abandon(previous.last_fire),
            version=version,
        )
    if cron == previous.cron and not revised.reactivated:
        return None  # TK-11: same schedule, same anchor; later fires use the new revision
    last = previous.last_fire if not revised.reactivated else _abandon(previous.last_fire)
    resume = last is not None and last.state is FireState.CLAIMED
    return ScheduleState(
        previous.task,
        cron,
        now,
        last.fire_at_ms if resume and last is not None else first_fire_after_ms,
        last,
        version,
    )


def schedule_after_removal(previous: ScheduleState | None) -> ScheduleState | None:
    """The bookkeeping after a soft removal (TK-12); None: there was no schedule."""
    if previous is None:
        return None
    return replace(
        previous,
        next_due_ms=None,
        last_fire=_abandon(previous.last_fire),
        version=previous.version + 1,
    )


# -- one cycle -----------------------------------------------------------------------------------


def _decide_one(candidate: ScheduleCandidate) -> FirePlan | Refresh:
    state = candidate.state
    last = state.last_fire
    if last is not None and last.state is FireState.CLAIMED:
        return _plan(state.task, last.revision, last.fire_at_ms, FireKind.RESUME, state.version)
    latest = candidate.latest_fire_ms
    if latest is not None and state.cron is not None and latest > state.anchor_ms:
        return _plan(state.task, candidate.current_revision, latest, FireKind.NEW, state.version)
    return Refresh(state.task, state.version, state.anchor_ms)


def _plan(task: str, revision: int, fire_at_ms: int, kind: FireKind, version: int) -> FirePlan:
    return FirePlan(
        task=task,
        revision=revision,
        fire_at_ms=fire_at_ms,
        kind=kind,
        expected_version=version,
        run_id=fire_run_id(task, revision, fire_at_ms),
        attempt_id=fire_attempt_id(task, revision, fire_at_ms),
    )


def _fire_order(plan: FirePlan) -> tuple[int, int, str]:
    return (0 if plan.kind is FireKind.RESUME else 1, plan.fire_at_ms, plan.task)


def _unique_tasks(candidates: Sequence[ScheduleCandidate]) -> bool:
    names = [c.state.task for c in candidates]
    return len(names) == len(set(names))


@icontract.require(lambda budget: isinstance(budget, int) and budget >= 1)
@icontract.require(_unique_tasks, "one candidate per task")
@icontract.ensure(
    lambda budget, result: len(result.fires) + len(result.refreshes) <= budget,
    "CAD-12: at most the phase budget per cycle",
)
@icontract.ensure(
    lambda result: len({f.task for f in result.fires}) == len(result.fires),
    "at most one fire per task per cycle",
)
@icontract.ensure(
    lambda candidates, result: all(
        f.kind is FireKind.RESUME or f.fire_at_ms > _by_task(candidates)[f.task].state.anchor_ms
        for f in result.fires
    ),
    "TK-9, TK-10: a new fire is after the anchor (never before the schedule, never again)",
)
def decide_fires(candidates: Sequence[ScheduleCandidate], budget: int) -> SchedulePlan:
    """Which fires to admit this cycle, and which due rows only need their due time refreshed
    (see the module docstring). At most `budget` items in all; one per task."""
    fires: list[FirePlan] = []
    refreshes: list[Refresh] = []
    for candidate in candidates:
        decision = _decide_one(candidate)
        if isinstance(decision, FirePlan):
            fires.append(decision)
        else:
            refreshes.append(decision)
    fires.sort(key=_fire_order)
    refreshes.sort(key=lambda r: (r.anchor_ms, r.task))
    kept = fires[:budget]
    return SchedulePlan(tuple(kept), tuple(refreshes[: budget - len(kept)]))


def _by_task(candidates: Sequence[ScheduleCandidate]) -> dict[str, ScheduleCandidate]:
    return {c.state.task: c for c in candidates}


def claim_fire(state: ScheduleState, plan: FirePlan) -> ScheduleState:
    """The bookkeeping that claims a `NEW` fire before its admission: the fire recorded as
    `claimed` and still due (so a crash resumes it), version + 1. Written where the version is
    still `plan.expected_version`."""
    return replace(
        state,
        last_fire=FireRecord(plan.fire_at_ms, plan.revision, FireState.CLAIMED),
        next_due_ms=plan.fire_at_ms,
        version=plan.expected_version + 1,
    )


def fire_command(plan: FirePlan, revision: TaskRevision) -> AdmitRun:
    """The admission of a planned fire (actor `trigger`), with `revision` the stored revision
    `(plan.task, plan.revision)`: its policy is the provider's policy (A-2)."""
    if revision.name != plan.task or revision.revision != plan.revision:
        raise ValueError("revision: not the planned fire's (task, revision)")
    return admit_command(revision, plan.run_id, plan.attempt_id, Actor.TRIGGER)


_RECORDED = {
    OutcomeKind.APPLIED: FireState.ADMITTED,
    OutcomeKind.REPLAYED: FireState.ADMITTED,  # the Run exists: a crash after its admission
    OutcomeKind.REJECTED: FireState.REFUSED,
}


def resolve_fire(plan: FirePlan, since_ms: int, outcome: Outcome) -> FireResolution | None:
    """The bookkeeping a fire's admission outcome leads to, by the outcome's *kind*: applied or
    an exact replay is `admitted`, rejected is `refused` (with its code; the fire is skipped and
    not retried), raced (a concurrent writer) is None: the claim stays and the next cycle resumes
    it. `since_ms` is the schedule's (for the next due time's anchor)."""
    state = _RECORDED.get(outcome.kind)
    if state is None:
        return None
    code = outcome.code if state is FireState.REFUSED else None
    claimed_version = plan.expected_version + (1 if plan.kind is FireKind.NEW else 0)
    return FireResolution(
        plan.task,
        claimed_version,
        FireRecord(plan.fire_at_ms, plan.revision, state, code),
        max(since_ms, plan.fire_at_ms),
    )


def resolved_schedule(
    claimed: ScheduleState, resolution: FireResolution, next_due_ms: int | None
) -> ScheduleState:
    """The bookkeeping after `resolution`, from the claimed row it was decided on;
    `next_due_ms` is the first cron time after `resolution.anchor_ms` (the runner's croniter)."""
    return replace(
        claimed,
        last_fire=resolution.record,
        next_due_ms=next_due_ms if claimed.cron is not None else None,
        version=resolution.expected_version + 1,
    )


def refreshed_schedule(
    state: ScheduleState, refresh: Refresh, next_due_ms: int | None
) -> ScheduleState:
    """The bookkeeping after `refresh`: `next_due_ms` is the first cron time after
    `refresh.anchor_ms` (the runner's croniter)."""
    return replace(
        state,
        next_due_ms=next_due_ms if state.cron is not None else None,
        version=refresh.expected_version + 1,
    )
