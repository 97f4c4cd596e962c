"""The Workflow kernel's Task transitions, directed (SPEC §4.3-§4.7, ADR-0229; WF-04, WF-08,
WF-10, WF-11, WF-12, WF-15, WF-16, I-W3).

Every state is reached through `apply_workflow` from nothing, as a runner would; the few states
no command can reach (a claimed Task Attempt without its ledger entry, or of a past epoch) are
built as stored data and must be refused before anything is decided. A refusal writes nothing:
only `WorkflowApplied` carries effects (§0.3), so each refusal asserts its exact outcome value.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import icontract
import pytest

from kernel.commands import LocalReceipt
from kernel.effects import AppendEvent, UpdateAttempt, UpdateRun
from kernel.evidence import CompletedEvidence, LiveEvidence, NotRunningEvidence, UnknownEvidence
from kernel.identity import workflow_task_attempt_id
from kernel.outcomes import Raced, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.states import (
    FINAL_ATTEMPT_STATUSES,
    AttemptStatus,
    CancelReason,
    CompletionOutcome,
    RunStatus,
    UnknownReason,
)
from kernel.workflow import (
    AdmitTask,
    AdvanceFrontier,
    CompleteTask,
    ConvergeWorkflowCancel,
    FailTaskStart,
    PrepareTask,
    RecordTaskHandle,
    RecoverTaskStartup,
    RequestWorkflowCancel,
    StepRun,
    StepRunStatus,
    TimeOutTask,
    UpdateStepRun,
    WorkflowAggregate,
    WorkflowApplied,
    WorkflowCommand,
    WorkflowOutcome,
    apply_workflow,
    dispatchable,
    stops_needed,
)
from kernel.workflow.transitions import WORKFLOW_TRANSITIONS
from tests.support.workflow_explore import (
    CALLBACK_DIGEST,
    EXECUTOR,
    RUN_ID,
    START_MS,
    WorkflowExploration,
    admit_command,
    digest_of,
    explore_workflows,
)

A = f"{RUN_ID}-a"  # the StepRun ids the fixed plans pin
B = f"{RUN_ID}-b"


# -- driving the kernel ---------------------------------------------------------------------------
def _at(wf: WorkflowAggregate) -> int:
    """One millisecond after the Workflow's last change (never a clock regression)."""
    return wf.run.updated_at_ms + 1


def _do(
    wf: WorkflowAggregate | None, command: WorkflowCommand, at: int | None = None
) -> WorkflowOutcome:
    when = (START_MS if wf is None else _at(wf)) if at is None else at
    return apply_workflow(wf, command, when)


def _ok(
    wf: WorkflowAggregate | None, command: WorkflowCommand, at: int | None = None
) -> WorkflowAggregate:
    outcome = _do(wf, command, at)
    assert isinstance(outcome, WorkflowApplied), outcome
    return outcome.aggregate


def _step(wf: WorkflowAggregate, step_run_id: str) -> StepRun:
    step = wf.step_run(step_run_id)
    assert step is not None
    return step


def _only_attempt(wf: WorkflowAggregate, step_run_id: str = A) -> str:
    live = [a for a in wf.attempts_of(step_run_id) if a.status not in FINAL_ATTEMPT_STATUSES]
    assert len(live) == 1
    return live[0].attempt_id


def _status(wf: WorkflowAggregate, attempt_id: str) -> AttemptStatus:
    attempt = wf.attempt(attempt_id)
    assert attempt is not None
    return attempt.status


def _ready(plan: str = "one") -> WorkflowAggregate:
    return _ok(_ok(None, admit_command(plan)), AdvanceFrontier(RUN_ID))


def _claimed(plan: str = "one", step_run_id: str = A) -> tuple[WorkflowAggregate, str]:
    wf = _ready(plan)
    wf = _ok(wf, AdmitTask(RUN_ID, step_run_id, _step(wf, step_run_id).version))
    return wf, _only_attempt(wf, step_run_id)


def _prepare(wf: WorkflowAggregate, attempt_id: str) -> PrepareTask:
    attempt = wf.attempt(attempt_id)
    assert attempt is not None
    return PrepareTask(RUN_ID, attempt_id, EXECUTOR, attempt.callback_sequence + 1, CALLBACK_DIGEST)


def _starting(plan: str = "one", step_run_id: str = A) -> tuple[WorkflowAggregate, str]:
    wf, attempt_id = _claimed(plan, step_run_id)
    return _ok(wf, _prepare(wf, attempt_id)), attempt_id


def _running(
    plan: str = "one", step_run_id: str = A, started_at: int | None = None
) -> tuple[WorkflowAggregate, str]:
    wf, attempt_id = _starting(plan, step_run_id)
    attempt = wf.attempt(attempt_id)
    assert attempt is not None
    started = attempt.created_at_ms if started_at is None else started_at
    return _ok(wf, RecordTaskHandle(RUN_ID, attempt_id, "pid:7", started)), attempt_id


def _receipt(
    wf: WorkflowAggregate, attempt_id: str, outcome: CompletionOutcome, started: int | None = None
) -> CompleteTask:
    attempt = wf.attempt(attempt_id)
    assert attempt is not None
    at = attempt.started_at_ms if started is None else started
    assert at is not None
    receipt = LocalReceipt(
        RUN_ID, attempt_id, attempt.callback_sequence, CALLBACK_DIGEST, outcome, at, 0
    )
    return CompleteTask(RUN_ID, attempt_id, receipt)


def _completed(
    wf: WorkflowAggregate, attempt_id: str, outcome: CompletionOutcome
) -> WorkflowAggregate:
    return _ok(wf, _receipt(wf, attempt_id, outcome))


# -- WF-04: dispatch eligibility -----------------------------------------------------------------
@pytest.mark.spec("WF-04")
def test_a_dispatchable_task_attempt_is_prepared_once() -> None:
    """The ledger entry, the StepRun `ready` at its epoch and an open parent: prepare moves
    Attempt `claimed -> starting` and StepRun `ready -> running` (a new epoch) together, and a
    second prepare finds it started (`Raced(NOT_ELIGIBLE)`: one spawn)."""
    wf, attempt_id = _claimed()
    entry = wf.admission_of(attempt_id)
    assert entry is not None
    assert entry.step_run_version == _step(wf, A).version
    attempt = wf.attempt(attempt_id)
    assert attempt is not None
    assert dispatchable(wf, attempt)
    prepared = _ok(wf, _prepare(wf, attempt_id))
    assert _status(prepared, attempt_id) is AttemptStatus.STARTING
    assert _step(prepared, A).status is StepRunStatus.RUNNING
    assert _step(prepared, A).version == entry.step_run_version + 1
    assert prepared.run.status is RunStatus.RUNNING
    assert _do(prepared, _prepare(prepared, attempt_id)) == Raced(Code.NOT_ELIGIBLE)


@pytest.mark.spec("WF-04")
def test_dispatch_needs_the_ledger_entry_the_ready_epoch_and_an_open_parent() -> None:
    """`dispatchable` (the rule prepare and the SQL sources share) with each condition broken in
    turn: no ledger entry, the StepRun not `ready`, the StepRun at another epoch, the Attempt
    not `claimed`, the parent not `running`, the parent with a cancellation intent."""
    wf, attempt_id = _claimed()
    attempt = wf.attempt(attempt_id)
    assert attempt is not None
    assert dispatchable(wf, attempt)
    step = _step(wf, A)

    def with_step(**changes: Any) -> WorkflowAggregate:
        return dataclasses.replace(wf, step_runs=(dataclasses.replace(step, **changes),))

    def with_run(**changes: Any) -> WorkflowAggregate:
        run = dataclasses.replace(wf.run, **changes)
        return dataclasses.replace(wf, core=dataclasses.replace(wf.core, run=run))

    broken = {
        "no ledger entry": dataclasses.replace(wf, ledger=()),
        "StepRun running": with_step(status=StepRunStatus.RUNNING),
        "StepRun pending": with_step(status=StepRunStatus.PENDING),
        "StepRun at a later epoch": with_step(version=step.version + 1),
        "parent failed": with_run(status=RunStatus.FAILED),
        "parent with intent": with_run(
            cancel_requested_at_ms=_at(wf), cancel_reason=CancelReason.USER
        ),
    }
    for why, stored in broken.items():
        assert not dispatchable(stored, attempt), why
    starting = dataclasses.replace(attempt, status=AttemptStatus.STARTING)
    assert not dispatchable(wf, starting), "Attempt not claimed"


@pytest.mark.spec("WF-04")
def test_prepare_refuses_every_attempt_that_is_not_dispatchable() -> None:
    """Reachable refusals with their exact codes: an intent on the parent
    (`CANCEL_REQUESTED`), an Attempt of a past epoch after a retry (`NOT_ELIGIBLE`), an
    unknown Attempt (`ATTEMPT_NOT_FOUND`), another executor (`EXECUTOR_TYPE_MISMATCH`), another
    Run (`RUN_NOT_FOUND`). Stored data no command writes (the ledger entry missing, the StepRun
    moved past the ledger's epoch) breaks I-W1/I-W2 and is refused by the precondition before
    anything is decided."""
    wf, attempt_id = _claimed()
    prepare = _prepare(wf, attempt_id)
    cancelled = _ok(wf, RequestWorkflowCancel(RUN_ID))
    assert _do(cancelled, _prepare(cancelled, attempt_id)) == Rejected(Code.CANCEL_REQUESTED)
    unknown = dataclasses.replace(prepare, attempt_id="wta:" + "f" * 32)
    assert _do(wf, unknown) == Rejected(Code.ATTEMPT_NOT_FOUND)
    other = dataclasses.replace(prepare, local_executor_type="docker")
    assert _do(wf, other) == Rejected(Code.EXECUTOR_TYPE_MISMATCH)
    assert _do(wf, dataclasses.replace(prepare, run_id="wf-2")) == Rejected(Code.RUN_NOT_FOUND)
    assert _do(None, prepare) == Rejected(Code.RUN_NOT_FOUND)

    # A retry epoch: the first Attempt's ledger version is past; only the new one dispatches.
    retry, first = _starting("retry")
    retry = _ok(retry, FailTaskStart(RUN_ID, first))
    assert _step(retry, A).status is StepRunStatus.READY
    assert _do(retry, _prepare(retry, first)) == Raced(Code.NOT_ELIGIBLE)
    retry = _ok(retry, AdmitTask(RUN_ID, A, _step(retry, A).version))
    second = _only_attempt(retry)
    assert second != first
    assert isinstance(_do(retry, _prepare(retry, second)), WorkflowApplied)

    step = _step(wf, A)
    for stored in (
        dataclasses.replace(wf, ledger=()),
        dataclasses.replace(wf, step_runs=(dataclasses.replace(step, version=step.version + 1),)),
    ):
        with pytest.raises(icontract.ViolationError, match="Workflow invariants"):
            apply_workflow(stored, prepare, _at(wf))


# -- WF-08: Workflow Task startup recovery (the kernel part) --------------------------------------
@pytest.mark.spec("WF-08")
def test_recovery_uses_the_receipt_first_and_never_finishes_the_parent() -> None:
    """Completed evidence (the receipt, read first by `obtain_evidence`) completes a started
    Task Attempt with the receipt's outcome, for a `running` and for a `starting` one (whose
    start time then comes from the receipt); the parent stays `running` although every StepRun
    is final: only the frontier ends it."""
    wf, attempt_id = _running()
    attempt = wf.attempt(attempt_id)
    assert attempt is not None
    evidence = CompletedEvidence(
        CompletionOutcome.SUCCEEDED, attempt.callback_sequence, 0, attempt.started_at_ms
    )
    outcome = _do(wf, RecoverTaskStartup(RUN_ID, attempt_id, evidence))
    assert isinstance(outcome, WorkflowApplied)
    assert outcome.code is Code.COMPLETED
    done = outcome.aggregate
    assert _status(done, attempt_id) is AttemptStatus.SUCCEEDED
    assert _step(done, A).status is StepRunStatus.SUCCEEDED
    assert done.run.status is RunStatus.RUNNING  # never finalized by recovery
    assert _ok(done, AdvanceFrontier(RUN_ID)).run.status is RunStatus.SUCCEEDED

    starting, started_id = _starting()
    pending = starting.attempt(started_id)
    assert pending is not None
    fact = pending.created_at_ms + 3
    receipt = CompletedEvidence(CompletionOutcome.FAILED, pending.callback_sequence, 1, fact)
    failed = _ok(starting, RecoverTaskStartup(RUN_ID, started_id, receipt))
    ended = failed.attempt(started_id)
    assert ended is not None
    assert ended.status is AttemptStatus.FAILED
    assert ended.started_at_ms == fact
    assert _step(failed, A).status is StepRunStatus.FAILED
    assert failed.run.status is RunStatus.RUNNING
    stale = dataclasses.replace(receipt, callback_sequence=pending.callback_sequence + 1)
    assert _do(starting, RecoverTaskStartup(RUN_ID, started_id, stale)) == Rejected(
        Code.RECEIPT_CONFLICT
    )


@pytest.mark.spec("WF-08")
def test_recovery_live_writes_nothing_and_unknown_fails_closed() -> None:
    """`live` (two consistent inspections) adopts: `Replayed(LIVE)`, nothing written; every
    `unknown` reason is `Rejected` with that reason's code; no evidence at all is
    `Replayed(EVIDENCE_REQUIRED)`."""
    for wf, attempt_id in (_starting(), _running()):
        command = RecoverTaskStartup(RUN_ID, attempt_id, LiveEvidence())
        assert _do(wf, command) == Replayed(Code.LIVE)
        for reason in UnknownReason:
            unknown = RecoverTaskStartup(RUN_ID, attempt_id, UnknownEvidence(reason))
            assert _do(wf, unknown) == Rejected(Code(reason.value))
        none = RecoverTaskStartup(RUN_ID, attempt_id, None)
        assert _do(wf, none) == Replayed(Code.EVIDENCE_REQUIRED)


@pytest.mark.spec("WF-08")
def test_not_running_loses_the_attempt_and_fails_the_step_without_a_new_epoch() -> None:
    """Trusted not-running evidence without a receipt: Attempt `lost`, StepRun `failed` with
    WORKFLOW_TASK_ATTEMPT_LOST at exactly one epoch more, no new Attempt, even with attempts
    left (a started Task may have had side effects, B-63); the parent stays `running`."""
    for plan in ("one", "retry"):
        for wf, attempt_id in (_starting(plan), _running(plan)):
            before = _step(wf, A)
            outcome = _do(wf, RecoverTaskStartup(RUN_ID, attempt_id, NotRunningEvidence()))
            assert isinstance(outcome, WorkflowApplied)
            assert outcome.code is Code.LOST
            after = outcome.aggregate
            assert _status(after, attempt_id) is AttemptStatus.LOST
            step = _step(after, A)
            assert step.status is StepRunStatus.FAILED
            assert step.error_code == Code.WORKFLOW_TASK_ATTEMPT_LOST.value
            assert step.version == before.version + 1
            assert len(after.attempts) == len(wf.attempts)
            assert after.ledger == wf.ledger
            assert after.run.status is RunStatus.RUNNING
            assert _do(after, AdmitTask(RUN_ID, A, step.version)) == Raced(Code.NOT_ELIGIBLE)


def test_recovery_leaves_a_claimed_attempt_dispatchable() -> None:
    """What the kernel does (its decision WF-4, `kernel/workflow/recovery.py`; not in
    docs/decisions.md, and SPEC §4.5's first bullet and WF-08's first clause say a `claimed`
    Attempt becomes `lost` with a new epoch): a `claimed` Task Attempt is not a recovery
    candidate, whatever the evidence, so it stays dispatchable."""
    wf, attempt_id = _claimed()
    for evidence in (None, NotRunningEvidence(), LiveEvidence()):
        command = RecoverTaskStartup(RUN_ID, attempt_id, evidence)
        assert _do(wf, command) == Raced(Code.NOT_ELIGIBLE)


# -- WF-10: generation-bound admission -----------------------------------------------------------
@pytest.mark.spec("WF-10")
def test_admission_replays_the_same_epoch_and_a_retry_epoch_gets_a_new_id() -> None:
    """Admission for the same `(step_run_id, v)` is `Replayed(EXISTING)` with no second Attempt
    or ledger entry, before and after the Attempt moved on; a stale epoch without an entry is
    `Raced(STEP_RUN_EPOCH_MISMATCH)`; after a retry the new epoch derives another `wta:` id."""
    wf = _ready("retry")
    version = _step(wf, A).version
    admitted = _ok(wf, AdmitTask(RUN_ID, A, version))
    (first,) = admitted.attempts
    assert first.attempt_id == workflow_task_attempt_id(digest_of("retry"), A, version)
    assert _do(admitted, AdmitTask(RUN_ID, A, version)) == Replayed(Code.EXISTING)
    assert _do(admitted, AdmitTask(RUN_ID, A, version - 1)) == Raced(Code.STEP_RUN_EPOCH_MISMATCH)
    started = _ok(admitted, _prepare(admitted, first.attempt_id))
    retried = _ok(started, FailTaskStart(RUN_ID, first.attempt_id))
    assert _do(retried, AdmitTask(RUN_ID, A, version)) == Replayed(Code.EXISTING)
    new_version = _step(retried, A).version
    assert new_version > version
    again = _ok(retried, AdmitTask(RUN_ID, A, new_version))
    second = _only_attempt(again)
    assert second != first.attempt_id
    assert second == workflow_task_attempt_id(digest_of("retry"), A, new_version)
    assert len(again.ledger) == 2
    assert [a.number for a in again.attempts] == [1, 2]


# -- WF-11 / WF-12: start time and clock ----------------------------------------------------------
@pytest.mark.spec("WF-11")
def test_the_stored_start_time_is_the_handle_fact_and_its_receipt_completes() -> None:
    """Attempt and StepRun `started_at_ms` are the handle's value, not the observation time;
    a receipt carrying that value completes; one carrying another value is not authenticated."""
    wf, attempt_id = _starting()
    attempt = wf.attempt(attempt_id)
    assert attempt is not None
    fact = attempt.created_at_ms + 1
    observed = _at(wf) + 40
    running = _ok(wf, RecordTaskHandle(RUN_ID, attempt_id, "pid:7", fact), observed)
    stored = running.attempt(attempt_id)
    assert stored is not None
    assert stored.started_at_ms == fact != observed
    assert _step(running, A).started_at_ms == fact
    assert running.run.started_at_ms == fact
    other = _receipt(running, attempt_id, CompletionOutcome.SUCCEEDED, started=fact + 1)
    assert _do(running, other) == Rejected(Code.RECEIPT_UNAUTHENTICATED)
    completed = _ok(running, _receipt(running, attempt_id, CompletionOutcome.SUCCEEDED))
    assert _status(completed, attempt_id) is AttemptStatus.SUCCEEDED


@pytest.mark.spec("WF-11", "WF-12")
def test_a_handle_fact_ahead_of_the_observation_is_stored_and_later_times_wait_for_it() -> None:
    """What the kernel does with a handle start time later than the observation time: it stores
    the fact as it is (§4.7: never a clock read), and any command observed before that fact is
    a clock regression for that Attempt (`workflow_regressed` counts its start time), so the
    receipt carrying it completes once the observation reaches it. Commands that do not end or
    change that Attempt are not held up by it (decision WF-5): a cancellation request applies
    meanwhile."""
    wf, attempt_id = _starting()
    observed = _at(wf)
    ahead = observed + 500
    running = _ok(wf, RecordTaskHandle(RUN_ID, attempt_id, "pid:7", ahead), observed)
    stored = running.attempt(attempt_id)
    assert stored is not None
    assert stored.started_at_ms == ahead
    assert _step(running, A).started_at_ms == ahead
    receipt = _receipt(running, attempt_id, CompletionOutcome.SUCCEEDED)
    assert _do(running, receipt, observed + 1) == Rejected(Code.CLOCK_REGRESSION)
    assert isinstance(_do(running, receipt, ahead), WorkflowApplied)
    assert isinstance(_do(running, RequestWorkflowCancel(RUN_ID), observed + 1), WorkflowApplied)


@pytest.mark.spec("WF-12")
def test_a_handle_start_before_the_attempt_is_invalid() -> None:
    wf, attempt_id = _starting()
    attempt = wf.attempt(attempt_id)
    assert attempt is not None
    early = RecordTaskHandle(RUN_ID, attempt_id, "pid:7", attempt.created_at_ms - 1)
    assert _do(wf, early) == Rejected(Code.START_TIME_INVALID)


@pytest.fixture(scope="module")
def shallow() -> WorkflowExploration:
    return explore_workflows(6)


@pytest.mark.spec("WF-12")
def test_every_command_observed_before_the_last_change_writes_nothing(
    shallow: WorkflowExploration,
) -> None:
    """Over the exploration: every command on an existing Workflow observed one millisecond
    before its last change writes nothing, and one that applies a millisecond later is refused
    there as CLOCK_REGRESSION (or, for a Task admission of a StepRun readied at that very
    millisecond, as not yet due: `Raced(NOT_ELIGIBLE)`)."""
    outcomes: dict[tuple[WorkflowAggregate, WorkflowCommand], dict[int, WorkflowOutcome]] = {}
    for wf, command, at, outcome in shallow.steps:
        if wf is not None:
            outcomes.setdefault((wf, command), {})[at - wf.run.updated_at_ms] = outcome
    regressions = 0
    for (wf, command), by_step in outcomes.items():
        back, on = by_step[-1], by_step[1]
        assert not isinstance(back, WorkflowApplied), (command, back)
        if isinstance(on, WorkflowApplied):
            regressions += 1
            due = (
                _step(wf, command.step_run_id).ready_at_ms
                if isinstance(command, AdmitTask)
                else None
            )
            expected = (
                Raced(Code.NOT_ELIGIBLE)
                if due == wf.run.updated_at_ms
                else Rejected(Code.CLOCK_REGRESSION)
            )
            assert back == expected, (command, back)
    assert regressions > 100


# -- §4.4 / I-W3: the frontier alone ends a Workflow ----------------------------------------------
def test_no_task_transition_ends_the_parent_the_frontier_does() -> None:
    """The last step succeeds: the parent stays `running` until `advance_frontier`, which ends
    it `succeeded` (B-62); with nothing to promote and a step not final, the frontier is not
    due. A two-step Workflow readies `b` only after `a` succeeded, one Attempt per step."""
    wf, attempt_id = _running()
    assert _do(wf, AdvanceFrontier(RUN_ID)) == Raced(Code.NOT_ELIGIBLE)
    done = _completed(wf, attempt_id, CompletionOutcome.SUCCEEDED)
    assert _step(done, A).status is StepRunStatus.SUCCEEDED
    assert done.run.status is RunStatus.RUNNING
    ended = _ok(done, AdvanceFrontier(RUN_ID))
    assert ended.run.status is RunStatus.SUCCEEDED
    assert ended.run.finished_at_ms == ended.run.updated_at_ms

    chain, first = _running("chain")
    assert _step(chain, B).status is StepRunStatus.PENDING
    chain = _completed(chain, first, CompletionOutcome.SUCCEEDED)
    assert _step(chain, B).status is StepRunStatus.PENDING
    chain = _ok(chain, AdvanceFrontier(RUN_ID))
    assert _step(chain, B).status is StepRunStatus.READY
    assert chain.run.status is RunStatus.RUNNING
    chain = _ok(chain, AdmitTask(RUN_ID, B, _step(chain, B).version))
    second = _only_attempt(chain, B)
    chain = _ok(chain, _prepare(chain, second))
    attempt = chain.attempt(second)
    assert attempt is not None
    chain = _ok(chain, RecordTaskHandle(RUN_ID, second, "pid:8", attempt.created_at_ms))
    chain = _completed(chain, second, CompletionOutcome.SUCCEEDED)
    assert chain.run.status is RunStatus.RUNNING
    chain = _ok(chain, AdvanceFrontier(RUN_ID))
    assert chain.run.status is RunStatus.SUCCEEDED
    assert len(chain.attempts) == len(chain.ledger) == 2


def test_a_failed_step_cancels_its_dependents_and_fails_the_parent() -> None:
    """`a` fails: the parent stays `running`; one frontier step cancels `b`
    (WORKFLOW_DEPENDENCY_FAILED) and ends the parent `failed` (WORKFLOW_STEP_FAILED)."""
    wf, attempt_id = _running("chain")
    failed = _completed(wf, attempt_id, CompletionOutcome.FAILED)
    assert _step(failed, A).status is StepRunStatus.FAILED
    assert failed.run.status is RunStatus.RUNNING
    outcome = _do(failed, AdvanceFrontier(RUN_ID))
    assert isinstance(outcome, WorkflowApplied)
    ended = outcome.aggregate
    b = _step(ended, B)
    assert b.status is StepRunStatus.CANCELLED
    assert b.error_code == Code.WORKFLOW_DEPENDENCY_FAILED.value
    assert ended.run.status is RunStatus.FAILED
    assert ended.run.error_code == Code.WORKFLOW_STEP_FAILED.value
    assert not ended.attempts_of(B)
    updated = {e.row.step_run_id for e in outcome.effects if isinstance(e, UpdateStepRun)}
    assert updated == {B}


@pytest.mark.parametrize(
    "finish",
    ["receipt_failed", "receipt_timed_out", "time_out", "fail_start"],
)
def test_a_retryable_end_with_attempts_left_is_a_new_ready_epoch(finish: str) -> None:
    """`max_attempts = 2` (decision WF-3): a failed or timed-out first Attempt puts the StepRun
    back to `ready` one epoch on with no start time; admission then derives a new `wta:` id; a
    second failure with no attempt left ends the StepRun `failed`. The parent stays `running`."""
    if finish == "fail_start":
        wf, attempt_id = _starting("retry")
        ended = _ok(wf, FailTaskStart(RUN_ID, attempt_id))
    else:
        wf, attempt_id = _running("retry")
        commands: dict[str, WorkflowCommand] = {
            "receipt_failed": _receipt(wf, attempt_id, CompletionOutcome.FAILED),
            "receipt_timed_out": _receipt(wf, attempt_id, CompletionOutcome.TIMED_OUT),
            "time_out": TimeOutTask(RUN_ID, attempt_id),
        }
        ended = _ok(wf, commands[finish])
    step = _step(ended, A)
    assert step.status is StepRunStatus.READY
    assert step.version == _step(wf, A).version + 1
    assert step.started_at_ms is None
    assert ended.run.status is RunStatus.RUNNING
    assert _status(ended, attempt_id) in {AttemptStatus.FAILED, AttemptStatus.TIMED_OUT}
    again, second = _starting_again(ended)
    assert second != attempt_id
    last = _ok(again, FailTaskStart(RUN_ID, second))
    assert _step(last, A).status is StepRunStatus.FAILED
    assert last.run.status is RunStatus.RUNNING
    assert _ok(last, AdvanceFrontier(RUN_ID)).run.status is RunStatus.FAILED


def _starting_again(wf: WorkflowAggregate) -> tuple[WorkflowAggregate, str]:
    wf = _ok(wf, AdmitTask(RUN_ID, A, _step(wf, A).version))
    attempt_id = _only_attempt(wf)
    return _ok(wf, _prepare(wf, attempt_id)), attempt_id


_TASK_COMMANDS = tuple(
    kind for kind in WORKFLOW_TRANSITIONS if kind not in (AdvanceFrontier, ConvergeWorkflowCancel)
)


def test_no_task_level_command_ever_ends_the_parent(shallow: WorkflowExploration) -> None:
    """I-W3 over the exploration: only `advance_frontier` and `converge_workflow_cancel` ever
    apply with a terminal parent afterwards (and both were seen doing it)."""
    enders = set()
    for wf, command, _at, outcome in shallow.steps:
        if isinstance(outcome, WorkflowApplied) and outcome.aggregate.run.status.terminal:
            assert wf is not None
            assert not wf.run.status.terminal
            assert not isinstance(command, _TASK_COMMANDS), command
            enders.add(type(command))
    assert enders == {AdvanceFrontier, ConvergeWorkflowCancel}


# -- WF-15 / WF-16: whole-Workflow cancellation convergence ---------------------------------------
@pytest.mark.spec("WF-15")
def test_a_workflow_cancelled_before_any_start_converges_in_one_step() -> None:
    """No Attempt started: nothing to stop, and one `converge_workflow_cancel` ends the claimed
    Attempt, every StepRun and the parent `cancelled`; no Attempt ever reached `starting`."""
    for wf in (_ok(None, admit_command("chain")), _claimed("chain")[0]):
        asked = _ok(wf, RequestWorkflowCancel(RUN_ID))
        assert asked.run.status is RunStatus.RUNNING
        assert stops_needed(asked) == ()
        assert _do(asked, AdmitTask(RUN_ID, A, _step(asked, A).version)) in (
            Rejected(Code.CANCEL_REQUESTED),
            Replayed(Code.EXISTING),
        )
        assert _do(asked, AdvanceFrontier(RUN_ID)) == Raced(Code.NOT_ELIGIBLE)
        outcome = _do(asked, ConvergeWorkflowCancel(RUN_ID))
        assert isinstance(outcome, WorkflowApplied)
        assert outcome.code is Code.CONVERGED
        done = outcome.aggregate
        assert done.run.status is RunStatus.CANCELLED
        assert {s.status for s in done.step_runs} == {StepRunStatus.CANCELLED}
        assert all(a.status is AttemptStatus.CANCELLED for a in done.attempts)
        assert all(
            a.started_at_ms is None and a.callback_token_sha256 is None for a in done.attempts
        )


@pytest.mark.spec("WF-16")
@pytest.mark.parametrize("reason", [CancelReason.USER, CancelReason.TIMEOUT])
def test_a_started_task_must_be_stopped_before_the_workflow_converges(reason: CancelReason) -> None:
    """With a started Task Attempt, convergence is refused LIVE_EXECUTION (nothing written)
    until the stop is named; then one transaction ends the Attempt, every StepRun and the
    parent with the intent's status (`timed_out` for a deadline)."""
    for wf, attempt_id in (_starting("chain"), _running("chain")):
        asked = _ok(wf, RequestWorkflowCancel(RUN_ID, reason))
        assert stops_needed(asked) == (attempt_id,)
        assert _do(asked, ConvergeWorkflowCancel(RUN_ID)) == Rejected(Code.LIVE_EXECUTION)
        unknown = ConvergeWorkflowCancel(RUN_ID, (attempt_id, "wta:" + "e" * 32))
        assert _do(asked, unknown) == Rejected(Code.ATTEMPT_NOT_FOUND)
        outcome = _do(asked, ConvergeWorkflowCancel(RUN_ID, (attempt_id,)))
        assert isinstance(outcome, WorkflowApplied)
        final = (
            StepRunStatus.TIMED_OUT if reason is CancelReason.TIMEOUT else StepRunStatus.CANCELLED
        )
        done = outcome.aggregate
        assert done.run.status.value == final.value
        assert _status(done, attempt_id).value == final.value
        assert {s.status for s in done.step_runs} == {final}
        kinds = [type(e) for e in outcome.effects if not isinstance(e, AppendEvent)]
        assert kinds.count(UpdateRun) == 1
        assert kinds.count(UpdateAttempt) == 1
        assert kinds.count(UpdateStepRun) == 2  # both StepRuns, one transaction
        replay = _do(done, ConvergeWorkflowCancel(RUN_ID, (attempt_id,)))
        assert not isinstance(replay, WorkflowApplied)  # a lost response replayed (WF-18)


def test_convergence_needs_an_intent() -> None:
    wf, attempt_id = _running()
    assert _do(wf, ConvergeWorkflowCancel(RUN_ID, (attempt_id,))) == Rejected(Code.NO_CANCEL_INTENT)
