"""Every edge and every missing pair of every state table, against the real code (ARCHITECTURE
rule 2; RUN-05, INBOX-01, INBOX-21, INBOX-22, INBOX-28).

One parametrized test over every machine's table (`kernel/specs/table.py`). For each, a walker
drives the code that obeys the table and reports what it saw: the edges the code took
`(source, trigger, target)`, and the pairs it was asked for and refused with the state unchanged.
The walkers never read the table: they try every declared (source, trigger) pair, or run fixed
scenarios, and observe. The test then requires that
- the code took every edge of the table, and nothing else (a step outside the table shows up as a
  taken non-edge);
- every missing pair was tried and refused.
So a row the code does not honour, or a step the table does not list, fails the walk (dropping a
row, adding one, or patching the code's guard each fail it; `docs/decisions.md` K-11).

- Run, Attempt, Run dispatch lease: a breadth-first exploration of the kernel from nothing
  (`tests/support/explore.py`: every command type in every reachable state, depth 6, two clock
  steps), plus the one step only stored data reaches.
- Workflow Run, StepRun, Task Attempt (SPEC §4): a breadth-first exploration of the Workflow
  kernel (`tests/support/workflow_explore.py`: three fixed plans, every Workflow command type
  with the arguments each reachable state offers, depth 7, a clock step on and one back), plus
  the Run statuses a Workflow never holds, tried on stored data. StepRun and Task Attempt count
  only the rows a command changes; see `_step_run_walk` for what a refusal means there.
- Approved action (issue 19, decision AA-D1): a breadth-first exploration of `apply_action`
  from no action: every approval-domain command in every reachable state, each state also tried
  with the Run evidence a store may hold under the action's Run id (none, its own Run, another
  Run), one millisecond per step.
- Journal record: `journal_step` on a record in each state (each reached through `journal_step`
  from a delivery), with one valid event per trigger, and on no record.
- Journal ownership: the real `JournalOwnership` on a temporary directory (a fixed clock, no
  refresh thread), driven through `acquire()`, `verify()` and `release()`; a failed
  verification is a refresh older than the stale window.
- Inbox lifecycle: the real `WorkerExecutionOfferInboxLifecycle` on a real file journal, driven
  through `start()` and `stop()` in seven scenarios; the journal and the injected recovery are
  wrapped to fail on demand or to look at the lifecycle mid-step. A missing pair whose trigger the
  public API cannot fire in that state (an internal step, or `start`/`stop` while `start()` holds
  the lifecycle's lock) is fired at the lifecycle's own table walk (`_move`), which must refuse.

Deterministic: no Hypothesis, no sleeps, no threads.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import icontract
import pytest

from kernel import (
    AdmitRun,
    Applied,
    AttemptStatus,
    RunStatus,
    SessionRefused,
    admit_run,
    check_invariants,
    decide_session,
)
from kernel.approved_action import (
    ACTION_COMMAND_TYPES,
    ActionAggregate,
    ActionApplied,
    ActionCommand,
    ApproveAction,
    ClaimAction,
    DenyAction,
    RequestApproval,
    ResolveAction,
    StartAction,
    apply_action,
    approval_id,
)
from kernel.commands import COMMAND_TYPES
from kernel.entities import Attempt
from kernel.outcomes import Raced, Rejected, Replayed
from kernel.specs.approved_action import ACTION_TABLE, ActionCommandName
from kernel.specs.budgets import Paging
from kernel.specs.cadence import (
    CADENCE_TABLE,
    CadenceRefused,
    CadenceState,
    CadenceStep,
    CadenceTrigger,
    cadence_config,
)
from kernel.specs.codes import Code
from kernel.specs.diagrams import DIAGRAMS
from kernel.specs.inbox_lifecycle import INBOX_TABLE, InboxState, InboxTrigger
from kernel.specs.journal import JOURNAL_TABLE, DeliveryKind, JournalState, JournalTrigger
from kernel.specs.journal_ownership import OWNERSHIP_TABLE, OwnershipState, OwnershipTrigger
from kernel.specs.table import Edge, Table
from kernel.specs.tables import ATTEMPT_TABLE, LEASE_TABLE, RUN_TABLE, CommandName
from kernel.specs.worker_session import SESSION_TABLE
from kernel.specs.workflow import (
    STEP_RUN_TABLE,
    TASK_ATTEMPT_TABLE,
    WORKFLOW_RUN_TABLE,
    StepRunStatus,
    WorkflowCommandName,
)
from kernel.transitions.transaction import Tx
from kernel.worker.auditor import AuditResult
from kernel.worker.journal import (
    CompletionAcknowledged,
    ControlPlaneAlreadyRunning,
    ControlPlaneTerminal,
    DeliveryAccepted,
    FailStartAcknowledged,
    HandleReturned,
    JournalApplied,
    JournalEvent,
    LaunchOutcomeUnknown,
    LeaseLost,
    LeaseVersionAdvanced,
    PrepareFailed,
    PrepareSucceeded,
    RetentionDelete,
    RunningAcknowledged,
    StartingAcknowledged,
    StartRefused,
    journal_step,
)
from kernel.worker.record import JournalRecord
from kernel.workflow import (
    WORKFLOW_COMMAND_TYPES,
    AdmitTask,
    AdvanceFrontier,
    WorkflowAggregate,
    WorkflowApplied,
    WorkflowCommand,
    apply_workflow,
)
from kernel.workflow.transaction import WorkflowTx
from runners.lifecycle import (
    CadenceLifecycle,
    CycleContext,
    DaemonScheduler,
    Scheduler,
    SteppedScheduler,
)
from runners.worker.inbox_lifecycle import RecoveryReport, WorkerExecutionOfferInboxLifecycle
from runners.worker.journal.file import FileJournal
from runners.worker.journal.lock import (
    LOCK_DIR_NAME,
    OWNER_FILE_NAME,
    JournalOwnership,
    JournalOwnershipError,
)
from runners.worker.journal.port import JournalPage
from tests.support.explore import Exploration, Step, explore, stored_data_steps
from tests.support.journal_fixtures import CALLBACK_DIGEST, T0, lease, offer, revisions
from tests.support.session_fixtures import NOW as SESSION_NOW
from tests.support.session_fixtures import request_for, rows_in
from tests.support.workflow_explore import (
    RUN_ID,
    START_MS,
    WORKFLOW_DEPTH,
    WorkflowExploration,
    admit_command,
    explore_workflows,
    stored_status_steps,
)

DEPTH = 6

AnyTable = Table[Any, Any]
Pair = tuple[Any, Any]


@dataclass
class Walk:
    """What a walker saw the real code do. `addressed` (the Workflow walks only) are the refused
    pairs seen refused by a command that named that very entity, not only left it alone."""

    taken: set[Edge[Any, Any]] = field(default_factory=set)
    refused: set[Pair] = field(default_factory=set)
    addressed: set[Pair] | None = None

    def took(self, source: Any, trigger: Any, target: Any) -> None:
        self.taken.add(Edge(source, trigger, target))

    def refuse(self, source: Any, trigger: Any, *, named: bool = False) -> None:
        self.refused.add((source, trigger))
        if named and self.addressed is not None:
            self.addressed.add((source, trigger))


# -- Run, Attempt, lease: the kernel, explored ---------------------------------------------------
@pytest.fixture(scope="module")
def exploration() -> Exploration:
    return explore(DEPTH)


def _kernel_steps(exploration: Exploration) -> list[Step]:
    return [*exploration.edges, *stored_data_steps(exploration)]


def _nothing_written(outcome: object) -> bool:
    """Only `Applied` carries effects: every other outcome writes nothing (§0.3)."""
    return isinstance(outcome, Rejected | Replayed | Raced)


def _run_walk(steps: list[Step]) -> Walk:
    """The Run table lists every applied command on an existing Run, status kept or not."""
    walk = Walk()
    for before, command, _at, outcome in steps:
        trigger = CommandName(command.name)
        source = None if before is None else before.run.status
        if isinstance(outcome, Applied):
            walk.took(source, trigger, outcome.aggregate.run.status)
        else:
            assert _nothing_written(outcome), outcome
            walk.refuse(source, trigger)
    return walk


def _attempt_walk(steps: list[Step]) -> Walk:
    """The latest Attempt before an applied command, with its status afterwards; an Attempt the
    command inserted is a creation edge, and a command that inserted none refused to create."""
    walk = Walk()
    for before, command, _at, outcome in steps:
        trigger = CommandName(command.name)
        after = outcome.aggregate if isinstance(outcome, Applied) else None
        known = {a.attempt_id for a in before.attempts} if before is not None else set()
        inserted = [a for a in after.attempts if a.attempt_id not in known] if after else []
        for attempt in inserted:
            walk.took(None, trigger, attempt.status)
        if not inserted:
            walk.refuse(None, trigger)
        latest = before.latest_attempt if before is not None else None
        if latest is None:
            continue
        if after is None:
            assert _nothing_written(outcome), outcome
            walk.refuse(latest.status, trigger)
            continue
        now = after.attempt(latest.attempt_id)
        assert now is not None
        walk.took(latest.status, trigger, now.status)
    return walk


def _lease_walk(steps: list[Step]) -> Walk:
    """Only the lease rows a command changes: every lease row the command left as it was is a
    refusal of that (status, command) pair."""
    walk = Walk()
    for before, command, _at, outcome in steps:
        trigger = CommandName(command.name)
        after = outcome.aggregate if isinstance(outcome, Applied) else None
        leases = before.leases if before is not None else ()
        known = {(x.attempt_id, x.lease_generation) for x in leases}
        inserted = [
            x
            for x in (after.leases if after else ())
            if (x.attempt_id, x.lease_generation) not in known
        ]
        for lease_row in inserted:
            walk.took(None, trigger, lease_row.status)
        if not inserted:
            walk.refuse(None, trigger)
        for lease_row in leases:
            now = (
                after.lease(lease_row.attempt_id, lease_row.lease_generation)
                if after
                else lease_row
            )
            assert now is not None
            if now != lease_row:
                walk.took(lease_row.status, trigger, now.status)
            else:
                walk.refuse(lease_row.status, trigger)
    return walk


# -- Workflow Run, StepRun, Task Attempt: the Workflow kernel, explored -------------------------
@pytest.fixture(scope="module")
def workflow_exploration() -> WorkflowExploration:
    return explore_workflows(WORKFLOW_DEPTH)


#: The Workflow commands that address the whole Workflow (the Run, every StepRun, every Task
#: Attempt); the others name one StepRun (`admit_task`) or one Task Attempt (the rest).
_WHOLE_WORKFLOW = frozenset(
    {
        WorkflowCommandName.ADMIT_WORKFLOW,
        WorkflowCommandName.ADVANCE_FRONTIER,
        WorkflowCommandName.REQUEST_WORKFLOW_CANCEL,
        WorkflowCommandName.CONVERGE_WORKFLOW_CANCEL,
    }
)


def _named_step_run(before: WorkflowAggregate, command: Any) -> str | None:
    """The StepRun a command names: `admit_task`'s own, a Task command's Attempt's, or None
    (a whole-Workflow command, or an Attempt that does not exist)."""
    if isinstance(command, AdmitTask):
        return command.step_run_id
    attempt_id = getattr(command, "attempt_id", None)
    attempt = before.attempt(attempt_id) if isinstance(attempt_id, str) else None
    return attempt.step_run_id if attempt is not None else None


def _names_step_run(before: WorkflowAggregate, command: Any, step_run_id: str) -> bool:
    trigger = WorkflowCommandName(command.name)
    return trigger in _WHOLE_WORKFLOW or _named_step_run(before, command) == step_run_id


def _names_attempt(before: WorkflowAggregate, command: Any, attempt: Attempt) -> bool:
    trigger = WorkflowCommandName(command.name)
    if trigger in _WHOLE_WORKFLOW:
        return True
    if isinstance(command, AdmitTask):
        return attempt.step_run_id == command.step_run_id
    return getattr(command, "attempt_id", None) == attempt.attempt_id


def _applied_workflow(outcome: object) -> WorkflowAggregate | None:
    if isinstance(outcome, WorkflowApplied):
        return outcome.aggregate
    assert _nothing_written(outcome), outcome
    return None


def _workflow_run_walk(exploration: WorkflowExploration) -> Walk:
    """The Workflow Run table lists every applied command, status kept or not (as the Run
    table); every command that did not apply refused its (parent status, trigger) pair.

    A Workflow Run never holds `created`, `queued`, `dispatching`, `lost` or `retry_wait` (it is
    admitted `running`, I-W3), so the exploration cannot try those sources. They are tried on
    stored data (`stored_status_steps`: an applied step replayed with only the parent's status
    replaced); the transitions' precondition refuses such an aggregate before deciding anything
    (`icontract.ViolationError`, nothing written), which counts as a refusal."""
    walk = Walk(addressed=set())
    stored: list[Any] = stored_status_steps(exploration)
    for before, command, _at, outcome in [*exploration.steps, *stored]:
        trigger = WorkflowCommandName(command.name)
        source = None if before is None else before.run.status
        if isinstance(outcome, icontract.ViolationError):
            assert "Workflow invariants" in str(outcome), outcome
            walk.refuse(source, trigger, named=True)
            continue
        after = _applied_workflow(outcome)
        if after is not None:
            walk.took(source, trigger, after.run.status)
        else:
            walk.refuse(source, trigger, named=True)  # every command names its Run
    return walk


def _step_run_walk(exploration: WorkflowExploration) -> Walk:
    """Only the StepRuns a command changes (as the lease walk): a StepRun the command inserted
    is a creation edge, and a command that inserted none refused to create; a StepRun it
    changed (any field: a new epoch) is an edge `status before -> status after`; a StepRun it
    left exactly as it was is a refusal of (its status, the trigger), whether the command was
    not applied or applied elsewhere.

    So a missing pair counts as refused as soon as one command of that trigger left one StepRun
    in that status unchanged, even a StepRun it did not name (`prepare_task` never names a
    `pending` StepRun: no Attempt of one exists). That is honest in one direction only: any
    command that changes a StepRun outside the table shows up as a taken non-edge and fails the
    walk, but a bystander refusal says nothing about a command aimed at that StepRun. The walk
    also records which refusals came from a command naming that StepRun (`admit_task`'s own,
    a Task command's Attempt's, or a whole-Workflow command) and prints their count."""
    walk = Walk(addressed=set())
    for before, command, _at, outcome in exploration.steps:
        trigger = WorkflowCommandName(command.name)
        after = _applied_workflow(outcome)
        olds = before.step_runs if before is not None else ()
        known = {s.step_run_id for s in olds}
        inserted = [s for s in (after.step_runs if after else ()) if s.step_run_id not in known]
        for step in inserted:
            walk.took(None, trigger, step.status)
        if not inserted:
            walk.refuse(None, trigger, named=True)
        for step in olds:
            now = after.step_run(step.step_run_id) if after is not None else step
            assert now is not None, "a StepRun is never deleted"
            if now != step:
                walk.took(step.status, trigger, now.status)
            else:
                assert before is not None
                named = _names_step_run(before, command, step.step_run_id)
                walk.refuse(step.status, trigger, named=named)
    return walk


def _task_attempt_walk(exploration: WorkflowExploration) -> Walk:
    """Only the Task Attempts a command changes, by the same rule as `_step_run_walk` (and
    with the same honest limit: a missing pair may be refused by a bystander Attempt the
    command did not name); `named` refusals come from a command naming that Attempt (a Task
    command's own id, `admit_task` for the Attempts of its StepRun, or a whole-Workflow
    command)."""
    walk = Walk(addressed=set())
    for before, command, _at, outcome in exploration.steps:
        trigger = WorkflowCommandName(command.name)
        after = _applied_workflow(outcome)
        olds = before.attempts if before is not None else ()
        known = {a.attempt_id for a in olds}
        inserted = [a for a in (after.attempts if after else ()) if a.attempt_id not in known]
        for attempt in inserted:
            walk.took(None, trigger, attempt.status)
        if not inserted:
            walk.refuse(None, trigger, named=True)
        for attempt in olds:
            now = after.attempt(attempt.attempt_id) if after is not None else attempt
            assert now is not None, "an Attempt is never deleted"
            if now != attempt:
                walk.took(attempt.status, trigger, now.status)
            else:
                assert before is not None
                walk.refuse(attempt.status, trigger, named=_names_attempt(before, command, attempt))
    return walk


# -- journal record: journal_step ---------------------------------------------------------------
def _step(record: JournalRecord, event: JournalEvent) -> JournalRecord:
    outcome = journal_step(record, event, record.updated_at_ms + 1)
    assert isinstance(outcome, JournalApplied)
    assert outcome.record is not None
    return outcome.record


def _journal_records() -> dict[JournalState, JournalRecord]:
    """One record per state, each reached through `journal_step` from a delivery."""
    accepted, starting, launching, started, running, completed = revisions()
    start_failed = _step(starting, PrepareFailed())
    return {
        JournalState.ACCEPTED: accepted,
        JournalState.STARTING_ACKNOWLEDGED: starting,
        JournalState.LAUNCHING: launching,
        JournalState.STARTED: started,
        JournalState.RUNNING_ACKNOWLEDGED: running,
        JournalState.START_FAILED: start_failed,
        JournalState.START_FAILURE_ACKNOWLEDGED: _step(start_failed, FailStartAcknowledged()),
        JournalState.COMPLETION_ACKNOWLEDGED: completed,
        # not a lease-loss reason, so a lease loss still applies (§3.15)
        JournalState.RECOVERY_REQUIRED: _step(launching, LaunchOutcomeUnknown()),
    }


def _journal_events() -> dict[JournalTrigger, JournalEvent]:
    """One event per trigger, with a payload valid for the records above (same authority, a
    higher lease version, the callback pair the records carry)."""
    events: list[JournalEvent] = [
        DeliveryAccepted(offer()),
        StartingAcknowledged(lease(version=3)),
        ControlPlaneAlreadyRunning(),
        ControlPlaneTerminal(),
        PrepareSucceeded(1, CALLBACK_DIGEST, T0 + 5),
        PrepareFailed(),
        HandleReturned("posix:v1:boot:4242:99"),
        StartRefused(),
        LaunchOutcomeUnknown(),
        RunningAcknowledged(),
        FailStartAcknowledged(),
        CompletionAcknowledged(1, CALLBACK_DIGEST),
        LeaseLost(stopped=True),
        LeaseVersionAdvanced(lease(version=9), DeliveryKind.LEASE_RECOVERY),
        RetentionDelete(),
    ]
    return {event.trigger: event for event in events}


def _journal_walk() -> Walk:
    records = _journal_records()
    events = _journal_events()
    assert set(records) == set(JournalState)
    assert set(events) == set(JournalTrigger)
    walk = Walk()
    for source in (None, *JournalState):
        record = None if source is None else records[source]
        for trigger, event in events.items():
            at = T0 if record is None else record.updated_at_ms + 1
            outcome = journal_step(record, event, at)
            if isinstance(outcome, JournalApplied):
                walk.took(source, trigger, None if outcome.record is None else outcome.record.state)
            elif outcome == Rejected(Code.JOURNAL_TRANSITION_INVALID):
                walk.refuse(source, trigger)  # records are immutable: nothing was written
    return walk


# -- journal ownership: the real lock on a temporary directory ----------------------------------
def _fresh_root(base: Path, name: str) -> Path:
    """A journal root that does not exist yet, in a private directory (F-1 creates it 0700)."""
    parent = base / name
    parent.mkdir(mode=0o700)
    return parent / "journal"


class _FixedClock:
    """Time moves only when a test moves it."""

    def __init__(self) -> None:
        self.mono_ns = 10**12
        self.wall_ns = 1_700_000_000 * 10**9

    def monotonic_ns(self) -> int:
        return self.mono_ns

    def time_ns(self) -> int:
        return self.wall_ns


class _NoTimer:
    """The refresh timer, never started: refreshes are not what this walk is about."""

    def start(self) -> None:
        pass

    def cancel(self) -> None:
        pass

    def join(self, timeout_s: float) -> None:
        pass


def _no_timer(_interval_s: float, _tick: Callable[[], bool]) -> _NoTimer:
    return _NoTimer()


def _answer(call: Callable[[], None]) -> tuple[Code, str] | None:
    try:
        call()
    except JournalOwnershipError as exc:
        return exc.code, exc.reason
    return None


def _ownership_probe(root: Path, source: OwnershipState, trigger: OwnershipTrigger) -> Walk:
    """Bring a fresh owner to `source`, fire `trigger` through the public API, observe."""
    clock = _FixedClock()
    ids = (f"owner-{n}" for n in itertools.count(1))
    owner = JournalOwnership(
        root, clock=clock, owner_id_factory=lambda: next(ids), timer_factory=_no_timer
    )
    lock = root / LOCK_DIR_NAME

    def owner_id() -> str | None:
        path = lock / OWNER_FILE_NAME
        return path.read_text() if path.exists() else None

    if source is not OwnershipState.UNOWNED:
        owner.acquire()
    if source is OwnershipState.COMPROMISED:
        os.utime(lock, ns=(clock.wall_ns + 7, clock.wall_ns + 7))  # someone touched the lock
        assert _answer(owner.verify) is not None
    if source is OwnershipState.RELEASED:
        owner.release()
    assert owner.state is source

    fired: bool
    if trigger is OwnershipTrigger.ACQUIRED:
        if source is not OwnershipState.OWNED and lock.exists():
            for entry in lock.iterdir():  # the lock is free: any refusal is the machine's own
                entry.unlink()
            lock.rmdir()
        held_by = owner_id()
        answer = _answer(owner.acquire)
        fired = answer is None and owner_id() not in (None, held_by)  # a new tenure began
    elif trigger is OwnershipTrigger.VERIFIED:
        fired = _answer(owner.verify) is None
    elif trigger is OwnershipTrigger.VERIFICATION_FAILED:
        control = _answer(owner.verify)  # what a verification says before anything fails
        clock.mono_ns += owner.stale_window_ms * 1_000_000 + 1  # the last refresh is now stale
        fired = _answer(owner.verify) != control
    else:
        held = lock.exists()
        answer = _answer(owner.release)
        fired = answer is None and held and not lock.exists()
    walk = Walk()
    if fired or owner.state is not source:
        walk.took(source, trigger, owner.state)
    else:
        walk.refuse(source, trigger)
    return walk


def _ownership_walk(base: Path) -> Walk:
    walk = Walk()
    for n, (source, trigger) in enumerate(itertools.product(OwnershipState, OwnershipTrigger)):
        seen = _ownership_probe(_fresh_root(base, f"probe-{n}"), source, trigger)
        walk.taken |= seen.taken
        walk.refused |= seen.refused
    return walk


# -- inbox lifecycle: the real lifecycle on a real file journal -----------------------------------
BUDGET = Paging(16, 4)


class _Journal:
    """A real `FileJournal` (its lock on a fixed clock, no refresh thread) that can fail or run
    a hook at a given port call: `hooks[("list", 2)]` runs at the second `list`."""

    def __init__(self, root: Path) -> None:
        self.inner = FileJournal(root, JournalOwnership(root, timer_factory=_no_timer))
        self.hooks: dict[tuple[str, int], Callable[[], None]] = {}
        self.calls: dict[str, int] = {}

    def _call(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        hook = self.hooks.get((name, self.calls[name]))
        if hook is not None:
            hook()

    @property
    def capacity(self) -> int:
        return self.inner.capacity

    def acquire(self) -> None:
        self._call("acquire")
        self.inner.acquire()

    def release(self) -> None:
        self._call("release")
        self.inner.release()

    def list(self, after: str | None, limit: int) -> JournalPage:
        self._call("list")
        return self.inner.list(after, limit)


def _seed_launching(root: Path) -> None:
    """An earlier tenure left a `launching` record (launch reconciliation: recovery runs)."""
    journal = FileJournal(root, JournalOwnership(root, timer_factory=_no_timer))
    journal.acquire()
    chain = revisions()[:3]
    journal.create(chain[0])
    for record in chain[1:]:
        journal.replace(record, record.revision - 1)
    journal.release()


def _fail() -> None:
    raise RuntimeError("injected port failure")


class _Recovery:
    """The injected startup recovery: reports a batch, raises, or runs a hook first."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.hook: Callable[[], None] | None = None

    def __call__(self, audit: AuditResult) -> RecoveryReport:
        if self.hook is not None:
            self.hook()
        if self.fail:
            raise RuntimeError("injected recovery failure")
        return RecoveryReport()


@dataclass
class _Setup:
    lifecycle: WorkerExecutionOfferInboxLifecycle
    journal: _Journal
    recovery: _Recovery | None
    others: list[FileJournal]

    def close(self) -> None:
        self.lifecycle.stop()
        for other in self.others:
            other.release()


def _setup(
    root: Path, *, seeded: bool = False, recovery: _Recovery | None = None, locked: bool = False
) -> _Setup:
    if seeded:
        _seed_launching(root)
    others = []
    if locked:  # a live owner holds the lock: acquire() fails JOURNAL_LOCKED
        other = FileJournal(root, JournalOwnership(root, timer_factory=_no_timer))
        other.acquire()
        others.append(other)
    journal = _Journal(root)
    lifecycle = WorkerExecutionOfferInboxLifecycle(journal, BUDGET, recovery=recovery)
    return _Setup(lifecycle, journal, recovery, others)


def _scenarios(base: Path) -> Iterator[WorkerExecutionOfferInboxLifecycle]:
    """Seven runs through the public API that between them take every step the lifecycle can."""
    roots = (_fresh_root(base, f"scenario-{n}") for n in itertools.count())
    stopped_early = _setup(next(roots))
    stopped_early.lifecycle.stop()  # inert -> stopped
    yield stopped_early.lifecycle
    held = _setup(next(roots))  # acquire, audit, hold; then stop
    held.lifecycle.start()
    held.lifecycle.stop()
    yield held.lifecycle
    locked = _setup(next(roots), locked=True)  # acquire fails
    locked.lifecycle.start()
    locked.close()
    yield locked.lifecycle
    audit_fails = _setup(next(roots))  # the audit raises
    audit_fails.journal.hooks[("list", 1)] = _fail
    audit_fails.lifecycle.start()
    yield audit_fails.lifecycle
    recovered = _setup(next(roots), seeded=True, recovery=_Recovery())  # recover, re-audit, hold
    recovered.lifecycle.start()
    recovered.close()
    yield recovered.lifecycle
    recovery_fails = _setup(next(roots), seeded=True, recovery=_Recovery(fail=True))
    recovery_fails.lifecycle.start()
    yield recovery_fails.lifecycle
    reaudit_fails = _setup(next(roots), seeded=True, recovery=_Recovery())
    reaudit_fails.journal.hooks[("list", 2)] = _fail  # the re-audit raises
    reaudit_fails.lifecycle.start()
    yield reaudit_fails.lifecycle


def _walked(lifecycle: WorkerExecutionOfferInboxLifecycle) -> list[Edge[Any, Any]]:
    """The lifecycle's steps, checked to be one connected walk from `inert` to where it is."""
    state = InboxState.INERT
    edges = []
    for step in lifecycle.history:
        assert step.source is state
        edges.append(Edge(step.source, step.trigger, step.target))
        state = step.target
    assert state is lifecycle.state
    return edges


def _guard_refuses(lifecycle: WorkerExecutionOfferInboxLifecycle, trigger: InboxTrigger) -> bool:
    """Fire `trigger` at the lifecycle's table walk: it must raise and change nothing."""
    before = (lifecycle.status, lifecycle.history)
    try:
        lifecycle._move(trigger)
    except RuntimeError:
        return (lifecycle.status, lifecycle.history) == before
    return False


def _inbox_probe(root: Path, source: InboxState, trigger: InboxTrigger) -> bool:
    """Bring a fresh lifecycle to `source` and fire `trigger`: True when it was refused with the
    state unchanged. Stable states are reached through the public API; a step in progress is
    caught from inside the port call it makes."""
    stable_public = {InboxTrigger.START: "start", InboxTrigger.STOP: "stop"}
    seen: list[bool] = []

    def probe_now(lifecycle: WorkerExecutionOfferInboxLifecycle) -> Callable[[], None]:
        def hook() -> None:
            assert lifecycle.state is source
            seen.append(_guard_refuses(lifecycle, trigger))

        return hook

    seeded = source in {InboxState.RECOVERING, InboxState.REAUDITING}
    setup = _setup(
        root,
        seeded=seeded,
        recovery=_Recovery() if seeded else None,
        locked=source is InboxState.REFUSED,
    )
    lifecycle = setup.lifecycle
    hook = probe_now(lifecycle)
    if source is InboxState.ACQUIRING:
        setup.journal.hooks[("acquire", 1)] = hook
    elif source is InboxState.AUDITING:
        setup.journal.hooks[("list", 1)] = hook
    elif source is InboxState.REAUDITING:
        setup.journal.hooks[("list", 2)] = hook
    elif source is InboxState.RECOVERING:
        assert setup.recovery is not None
        setup.recovery.hook = hook
    elif source is InboxState.STOPPING:
        setup.journal.hooks[("release", 1)] = hook
    try:
        if source is not InboxState.INERT:
            lifecycle.start()
        if source in {InboxState.STOPPING, InboxState.STOPPED}:
            lifecycle.stop()
    except RuntimeError:
        # Only after the probe took a step (a pair the lifecycle allows): the run cannot go on.
        assert seen == [False], (source, trigger)
        for other in setup.others:
            other.release()
        return False
    if source in {InboxState.INERT, InboxState.HOLDING, InboxState.STOPPED, InboxState.REFUSED}:
        assert lifecycle.state is source
        if trigger in stable_public:
            before = (lifecycle.status, lifecycle.history)
            getattr(lifecycle, stable_public[trigger])()
            seen.append((lifecycle.status, lifecycle.history) == before)
        else:
            seen.append(_guard_refuses(lifecycle, trigger))
    setup.close()
    assert len(seen) == 1, (source, trigger)
    return seen[0]


def _inbox_walk(base: Path) -> Walk:
    walk = Walk()
    for lifecycle in _scenarios(base):
        walk.taken.update(_walked(lifecycle))
    for n, (source, trigger) in enumerate(itertools.product(InboxState, InboxTrigger)):
        if _inbox_probe(_fresh_root(base, f"probe-{n}"), source, trigger):
            walk.refuse(source, trigger)
    return walk


# -- Cadence lifecycle: the real CadenceLifecycle, driven through its public calls -------------
def _wait_for(condition: Callable[[], bool], what: str) -> None:
    # Another thread's call reached the lifecycle's decision: bounded, never a fixed sleep.
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, f"waited 30 s for {what}"
        time.sleep(0.001)


def _cadence_state(lifecycle: CadenceLifecycle[None]) -> CadenceState:
    return lifecycle.state  # a call: a type checker does not carry one reading past a call


def _session_walk() -> Walk:
    """Every (status, trigger) through `decide_session`, the function the registry's every write
    obeys (runners/cluster/registry.py writes what it decided): a row in the lookup status, a
    well-formed request naming its session; the decision's record status is the target, a
    refusal leaves nothing to write."""
    walk = Walk()
    for source in SESSION_TABLE.sources:
        for trigger in SESSION_TABLE.triggers:
            current = rows_in(source, trigger)
            decision = decide_session(current, request_for(trigger, current), SESSION_NOW)
            if isinstance(decision, SessionRefused):
                walk.refuse(source, trigger)
            else:
                assert decision.before == current
                walk.took(source, trigger, decision.record.status)
    return walk


def _cadence_walk() -> Walk:
    """Seven scenarios through `start()`, `run_once()`, `stop()`, timer ticks (a stale tick is
    the timer's callback called again) and cycles returning, with other threads' calls made
    from inside a cycle. Every decision is read from the lifecycle's `trace`; after each public
    call the lifecycle holds the state the decision named. `settled` and `timed_out` in a state
    with no cycle in flight cannot come from the public calls: they are fired at the
    lifecycle's own decision (`_fire`), which must refuse."""
    walk = Walk()
    decisions: list[tuple[CadenceState, CadenceTrigger]] = []

    def trace(source: CadenceState, trigger: CadenceTrigger, step: object) -> None:
        decisions.append((source, trigger))
        if isinstance(step, CadenceRefused):
            walk.refuse(source, trigger)
        else:
            assert isinstance(step, CadenceStep)
            walk.took(source, trigger, step.target)

    def make(
        cycle: Callable[[CycleContext], None], scheduler: Scheduler | None = None
    ) -> tuple[CadenceLifecycle[None], Scheduler]:
        scheduler = SteppedScheduler() if scheduler is None else scheduler
        config = cadence_config(1_000, stop_timeout_ms=5_000, initial_delay_ms=250)
        return CadenceLifecycle("walk", cycle, config, scheduler=scheduler, trace=trace), scheduler

    def poke(lifecycle: CadenceLifecycle[None], *triggers: CadenceTrigger) -> None:
        for trigger in triggers:
            before = lifecycle.state
            with lifecycle._lock:
                lifecycle._fire(trigger)
            assert lifecycle.state is before

    def in_thread(
        call: Callable[[], object], source: CadenceState, trigger: CadenceTrigger
    ) -> None:
        threading.Thread(target=call, daemon=True).start()
        _wait_for(lambda: (source, trigger) in decisions, f"{trigger} in {source}")

    no_cycle = (CadenceTrigger.SETTLED, CadenceTrigger.TIMED_OUT)

    # 1. inert, waiting, running, stopped through the public calls on one lifecycle.
    def cycle_1(_context: CycleContext) -> None:
        first.start()
        first._tick()  # a stale timer: refused while the cycle runs
        poke(first, CadenceTrigger.TIMED_OUT)

    first, stepped = make(cycle_1)
    assert isinstance(stepped, SteppedScheduler)
    poke(first, CadenceTrigger.TICK, *no_cycle)
    first.start()
    first.start()
    poke(first, *no_cycle)
    stepped.advance(250)
    assert _cadence_state(first) is CadenceState.WAITING
    first.run_once()
    first.stop()
    assert _cadence_state(first) is CadenceState.STOPPED
    for refused in (first.start, first.run_once):
        assert isinstance(refused(), CadenceRefused)
        assert _cadence_state(first) is CadenceState.STOPPED
    first._tick()
    first.stop()
    poke(first, *no_cycle)
    # 2. stop on an inert lifecycle.
    make(lambda _context: None)[0].stop()

    # 3. a hand-driven (manual) cycle joined by another run_once.
    def cycle_3(_context: CycleContext) -> None:
        third._tick()
        poke(third, CadenceTrigger.TIMED_OUT)
        in_thread(third.run_once, CadenceState.MANUAL, CadenceTrigger.RUN_ONCE)

    third, _ = make(cycle_3)
    third.run_once()
    assert _cadence_state(third) is CadenceState.INERT

    # 4. started while a manual cycle runs: the timer comes when it settles.
    def cycle_4(_context: CycleContext) -> None:
        fourth.start()

    fourth_scheduler = SteppedScheduler()
    fourth, _ = make(cycle_4, fourth_scheduler)
    fourth.run_once()
    assert _cadence_state(fourth) is CadenceState.WAITING
    assert fourth_scheduler.pending_ms == 1_000

    # 5. stopped while a manual cycle runs, on a real scheduler: stopping, then drained.
    def cycle_5(_context: CycleContext) -> None:
        in_thread(fifth.stop, CadenceState.MANUAL, CadenceTrigger.STOP)
        for refused in (fifth.start, fifth.run_once):
            assert isinstance(refused(), CadenceRefused)
        fifth._tick()
        in_thread(fifth.stop, CadenceState.STOPPING, CadenceTrigger.STOP)

    fifth, _ = make(cycle_5, DaemonScheduler("walk"))
    fifth.run_once()
    _wait_for(lambda: _cadence_state(fifth) is CadenceState.STOPPED, "the stop to drain")
    assert fifth.stop().drained

    # 6. stopped from inside its own timer cycle: the wait times out; the cycle settles late.
    def cycle_6(_context: CycleContext) -> None:
        assert not sixth.stop().drained

    sixth, sixth_scheduler = make(cycle_6)
    sixth.start()
    assert isinstance(sixth_scheduler, SteppedScheduler)
    assert sixth_scheduler.advance(250) == 1
    assert _cadence_state(sixth) is CadenceState.STOPPED

    # 7. a timer cycle joined by a run_once.
    def cycle_7(_context: CycleContext) -> None:
        in_thread(seventh.run_once, CadenceState.RUNNING, CadenceTrigger.RUN_ONCE)

    seventh, seventh_scheduler = make(cycle_7)
    seventh.start()
    assert isinstance(seventh_scheduler, SteppedScheduler)
    assert seventh_scheduler.advance(250) == 1
    poke(seventh, *no_cycle)
    seventh.stop()
    return walk


# -- approved action: apply_action, explored -------------------------------------------------------
_ACTION_ADMISSION = AdmitRun(
    run_id="run-" + "a" * 32,
    attempt_id="att-" + "a" * 32,
    project_id="local",
    task_id="t",
    task_revision=1,
    executor_type="local.posix",
)


def _action_evidence(agg: ActionAggregate) -> list[ActionAggregate]:
    """The aggregate as loaded, and, when no Run is under the action's Run id, the same action
    with the Run a store could also hold there: its own (admitted by another path) or another
    task's Run under that id. Built with the Run kernel (`admit_run`), never by hand."""
    if agg.run is not None:
        return [agg]
    out = [agg]
    for task_id in ("t", "another-task"):
        run = admit_run(None, dataclasses.replace(_ACTION_ADMISSION, task_id=task_id), START_MS)
        assert isinstance(run, Applied)
        out.append(dataclasses.replace(agg, run=run.aggregate))
    return out


def _action_walk() -> Walk:
    """Every approval-domain command on every reachable action (and on none), each state with
    each Run evidence of `_action_evidence`; an applied outcome is an edge `status before ->
    status after`, any other outcome (which writes nothing, §0.3) refuses the pair. Every command
    names the one action, so every refusal is addressed. States are told apart by status and
    which Run is under the id, so the exploration ends (at most 7 x 3 states)."""
    walk = Walk(addressed=set())
    key = approval_id(_ACTION_ADMISSION.run_id)
    commands: list[ActionCommand] = [
        RequestApproval(key, _ACTION_ADMISSION, "ann"),
        ApproveAction(key, "bob"),
        DenyAction(key, "bob"),
        ClaimAction(key),
        StartAction(key),
        ResolveAction(key),
    ]
    assert {type(c) for c in commands} == set(ACTION_COMMAND_TYPES)

    def signature(agg: ActionAggregate) -> tuple[Any, ...]:
        run = None if agg.run is None else agg.run.run.task_id
        return (agg.action.status, run)

    frontier: list[ActionAggregate | None] = [None]
    seen: set[tuple[Any, ...]] = set()
    while frontier:
        loaded = frontier.pop(0)
        for before in [None] if loaded is None else _action_evidence(loaded):
            now = START_MS if before is None else before.action.updated_at_ms + 1
            source = None if before is None else before.action.status
            for command in commands:
                trigger = ActionCommandName(command.name)
                outcome = apply_action(before, command, now)
                if not isinstance(outcome, ActionApplied):
                    assert _nothing_written(outcome), outcome
                    walk.refuse(source, trigger, named=True)
                    continue
                walk.took(source, trigger, outcome.action.status)
                after = ActionAggregate(outcome.action, outcome.run)
                if signature(after) not in seen:
                    seen.add(signature(after))
                    frontier.append(after)
    return walk


# -- the walk --------------------------------------------------------------------------------------
WALKED: list[Any] = [
    # The Run-side walks share the breadth-first exploration of the kernel (about 12 s).
    pytest.param(RUN_TABLE, marks=[pytest.mark.spec("RUN-05"), pytest.mark.slow], id="run"),
    pytest.param(ATTEMPT_TABLE, marks=[pytest.mark.spec("RUN-05"), pytest.mark.slow], id="attempt"),
    pytest.param(LEASE_TABLE, marks=[pytest.mark.spec("RUN-05"), pytest.mark.slow], id="lease"),
    pytest.param(JOURNAL_TABLE, marks=pytest.mark.spec("INBOX-01"), id="journal"),
    pytest.param(OWNERSHIP_TABLE, marks=pytest.mark.spec("INBOX-21", "INBOX-22"), id="ownership"),
    pytest.param(INBOX_TABLE, marks=pytest.mark.spec("INBOX-28"), id="inbox"),
    pytest.param(SESSION_TABLE, marks=pytest.mark.spec("RUN-05"), id="worker_session"),
    pytest.param(CADENCE_TABLE, marks=pytest.mark.spec("CAD-13"), id="cadence"),
    # The Workflow walks share the exploration of the Workflow kernel (about 2 s).
    pytest.param(WORKFLOW_RUN_TABLE, marks=pytest.mark.spec("RUN-05"), id="workflow_run"),
    pytest.param(STEP_RUN_TABLE, marks=pytest.mark.spec("RUN-05"), id="step_run"),
    pytest.param(TASK_ATTEMPT_TABLE, marks=pytest.mark.spec("RUN-05", "WF-04"), id="task_attempt"),
    # The approval domain (issue 19): its own small exploration (milliseconds).
    pytest.param(ACTION_TABLE, marks=pytest.mark.spec("RUN-05"), id="approved_action"),
]


def _walk(table: AnyTable, request: pytest.FixtureRequest, base: Path) -> Walk:
    if table is JOURNAL_TABLE:
        return _journal_walk()
    if table is OWNERSHIP_TABLE:
        return _ownership_walk(base)
    if table is INBOX_TABLE:
        return _inbox_walk(base)
    if table is CADENCE_TABLE:
        return _cadence_walk()
    if table is SESSION_TABLE:
        return _session_walk()
    if table is ACTION_TABLE:
        return _action_walk()
    workflow_walkers = (
        (WORKFLOW_RUN_TABLE, _workflow_run_walk),
        (STEP_RUN_TABLE, _step_run_walk),
        (TASK_ATTEMPT_TABLE, _task_attempt_walk),
    )
    for known, workflow_walker in workflow_walkers:
        if known is table:
            explored: WorkflowExploration = request.getfixturevalue("workflow_exploration")
            return workflow_walker(explored)
    steps = _kernel_steps(request.getfixturevalue("exploration"))
    walkers = ((RUN_TABLE, _run_walk), (ATTEMPT_TABLE, _attempt_walk), (LEASE_TABLE, _lease_walk))
    return next(walker for known, walker in walkers if known is table)(steps)


@pytest.mark.parametrize("table", WALKED)
def test_the_real_code_takes_every_edge_and_refuses_every_missing_pair(
    table: AnyTable, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The code that obeys `table` takes each of its edges and no other step, and refuses each
    of its missing pairs with the state unchanged."""
    walk = _walk(table, request, tmp_path)
    edges = set(table.edges())
    assert edges - walk.taken == set(), "edges the code never took"
    assert walk.taken - edges == set(), "steps the code took that are not edges"
    missing = set(table.missing())
    assert missing - walk.refused == set(), "missing pairs not refused (or never tried)"
    assert missing, "every machine has pairs it refuses"
    named = ""
    if walk.addressed is not None:
        named = f" ({len(missing & walk.addressed)} by a command naming that entity)"
    print(f"{table.name}: {len(edges)} edges taken, {len(missing)} missing pairs refused{named}")


def test_every_table_is_walked_and_the_triggers_are_the_real_ones() -> None:
    """The walk covers every table the diagrams draw, and the Run side's, the Workflow's and the
    approval domain's triggers are exactly the commands `apply`, `apply_workflow` and
    `apply_action` dispatch (so no command escapes the tables)."""
    walked = [param.values[0] for param in WALKED]
    assert [id(t) for t in walked] == [id(t) for _title, t, _module in DIAGRAMS]
    assert {c.name for c in COMMAND_TYPES} == set(CommandName)
    workflow_types: tuple[type[WorkflowCommand], ...] = WORKFLOW_COMMAND_TYPES
    assert {c.name for c in workflow_types} == set(WorkflowCommandName)
    assert len(WORKFLOW_COMMAND_TYPES) == len(WorkflowCommandName)
    assert {c.name for c in ACTION_COMMAND_TYPES} == set(ActionCommandName)
    assert len(ACTION_COMMAND_TYPES) == len(ActionCommandName)


# -- the exploration's other uses -----------------------------------------------------------------
@pytest.mark.slow
def test_the_stored_data_step_fails_a_waiting_run_closed(exploration: Exploration) -> None:
    """The one edge only stored data reaches: `retry_wait` + R1 (retry disabled) -> `failed`,
    with the cursor cleared."""
    ((stored, _command, _at, outcome),) = stored_data_steps(exploration)
    assert stored is not None
    assert stored.run.status is RunStatus.RETRY_WAIT
    assert isinstance(outcome, Applied)
    assert outcome.code is Code.FAILED_DISABLED
    assert outcome.aggregate.run.status is RunStatus.FAILED
    assert outcome.aggregate.policy is not None
    assert outcome.aggregate.policy.next_attempt_at_ms is None


@pytest.mark.slow
@pytest.mark.spec("RUN-01")
def test_exhaustive_small_scope_keeps_every_invariant(exploration: Exploration) -> None:
    """Exhaustive small scope: every state reachable within the depth (one Run, its Workers, a
    bounded clock) satisfies I-1..I-9; the count is printed for the record."""
    states = {o.aggregate for _b, _c, _t, o in exploration.edges if isinstance(o, Applied)}
    for state in states:
        assert check_invariants(state) == [], state.run.status
    print(f"exhaustive small scope: depth {DEPTH}, {len(states)} distinct aggregates")
    assert exploration.states > 1_000


def test_an_illegal_move_fails_closed() -> None:
    """The transaction builder consults the tables: a change that is not an edge for the command
    is refused as INVALID_TRANSITION, never applied."""
    admitted = admit_run(
        None,
        AdmitRun(
            run_id="r1",
            attempt_id="a1",
            project_id="p",
            task_id="t",
            task_revision=1,
            executor_type="shell",
        ),
        1_000,
    )
    assert isinstance(admitted, Applied)
    tx = Tx.begin(admitted.aggregate, "renew_lease", 2_000)
    tx.set_run(status=RunStatus.SUCCEEDED)
    assert tx.commit() == Rejected(Code.INVALID_TRANSITION)
    tx = Tx.begin(admitted.aggregate, "grant_lease", 2_000)
    tx.set_attempt("a1", status=AttemptStatus.RUNNING)
    tx.set_run(status=RunStatus.DISPATCHING)
    assert tx.commit() == Rejected(Code.INVALID_TRANSITION)
    tx = Tx.begin(admitted.aggregate, "not_a_command", 2_000)  # no table knows it
    assert tx.commit() == Rejected(Code.INVALID_TRANSITION)


def test_an_illegal_workflow_move_fails_closed() -> None:
    """`WorkflowTx` consults the three Workflow tables: a parent, StepRun or Task Attempt
    change that is not an edge for the command is refused as INVALID_TRANSITION, never applied
    (no Task command ends the parent, I-W3; a StepRun skips no status; an Attempt no barrier)."""
    admitted = apply_workflow(None, admit_command("chain"), START_MS)
    assert isinstance(admitted, WorkflowApplied)
    wf = admitted.aggregate
    first, second = (s.step_run_id for s in wf.step_runs)
    tx = WorkflowTx.begin_workflow(wf, "complete_task", START_MS + 1)
    tx.set_run(status=RunStatus.SUCCEEDED)
    assert tx.commit_workflow() == Rejected(Code.INVALID_TRANSITION)
    tx = WorkflowTx.begin_workflow(wf, "prepare_task", START_MS + 1)
    tx.set_step(first, status=StepRunStatus.RUNNING)  # pending has no prepare row
    assert tx.commit_workflow() == Rejected(Code.INVALID_TRANSITION)
    tx = WorkflowTx.begin_workflow(wf, "advance_frontier", START_MS + 1)
    tx.set_step(second, status=StepRunStatus.SUCCEEDED)  # the frontier only readies or cancels
    assert tx.commit_workflow() == Rejected(Code.INVALID_TRANSITION)
    frontier = apply_workflow(wf, AdvanceFrontier(RUN_ID), START_MS + 1)
    assert isinstance(frontier, WorkflowApplied)
    step = frontier.aggregate.step_run(first)
    assert step is not None
    assert step.status is StepRunStatus.READY
    claimed = apply_workflow(
        frontier.aggregate, AdmitTask(RUN_ID, first, step.version), START_MS + 2
    )
    assert isinstance(claimed, WorkflowApplied)
    (attempt,) = claimed.aggregate.attempts
    tx = WorkflowTx.begin_workflow(claimed.aggregate, "record_task_handle", START_MS + 3)
    tx.set_attempt(attempt.attempt_id, status=AttemptStatus.RUNNING)  # skips the start barrier
    assert tx.commit_workflow() == Rejected(Code.INVALID_TRANSITION)
    tx = WorkflowTx.begin_workflow(claimed.aggregate, "request_cancel", START_MS + 3)  # a Run name
    assert tx.commit_workflow() == Rejected(Code.INVALID_TRANSITION)
    # The same moves under a command whose row allows them do apply: the refusals above are the
    # tables', not a builder that refuses everything.
    tx = WorkflowTx.begin_workflow(claimed.aggregate, "prepare_task", START_MS + 3)
    tx.set_attempt(attempt.attempt_id, status=AttemptStatus.STARTING)
    tx.set_step(first, status=StepRunStatus.RUNNING)
    assert isinstance(tx.commit_workflow(), WorkflowApplied)
