"""Workflow Task startup recovery (§4.5, ADR-0229 §3, WF-08): per Task Attempt, timerless,
never finishing the parent. Ordinary startup recovery never selects a Workflow (REC-07).

- `starting`/`running`: the authenticated receipt first (`completed` evidence: the outcome, as
  a completion); without one only two consistent live inspections of the persisted identity
  (`live`: adopt, nothing written) or trusted `not_running` evidence (Attempt `lost`, StepRun
  `failed` with `WORKFLOW_TASK_ATTEMPT_LOST`, no new epoch: a started Task may have had side
  effects, B-63). `unknown` writes nothing (fail closed).
- A started Attempt proven never launched (`launched=False`: no handle, no launcher journal
  line, D-1) with `not_running` evidence never ran: `lost` and a new `ready` epoch (WF-6).
- `claimed`: never orphaned here (decision WF-4): admission writes the ledger entry and the
  Attempt with the StepRun `ready` at that epoch in one transaction and `prepare_task` commits
  before any spawn, so a `claimed` Task Attempt found at startup never ran and stays
  dispatchable; replacing it would add an Attempt the no-crash run does not have (WF-17).
"""

from __future__ import annotations

from kernel.evidence import CompletedEvidence, LiveEvidence, NotRunningEvidence, UnknownEvidence
from kernel.outcomes import Raced, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.states import Actor, AttemptStatus
from kernel.workflow.commands import RecoverTaskStartup
from kernel.workflow.contracts import workflow_transition
from kernel.workflow.entities import WorkflowAggregate
from kernel.workflow.execution import finish_task, relaunch_task, task_completion_status
from kernel.workflow.outcomes import WorkflowOutcome
from kernel.workflow.rules import workflow_regressed
from kernel.workflow.transaction import WorkflowTx

__all__ = ["recover_task_startup", "recovery_candidates"]

_STARTED = frozenset({AttemptStatus.STARTING, AttemptStatus.RUNNING})


def recovery_candidates(wf: WorkflowAggregate) -> tuple[str, ...]:
    """The Task Attempts of one Workflow that startup recovery resolves: the started ones."""
    return tuple(a.attempt_id for a in wf.attempts if a.status in _STARTED)


@workflow_transition
def recover_task_startup(
    aggregate: WorkflowAggregate | None, command: RecoverTaskStartup, observed_at_ms: int
) -> WorkflowOutcome:
    """Resolve one started Task Attempt with its evidence (§4.5, §2.1)."""
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return Raced(Code.NOT_ELIGIBLE)
    wf = aggregate
    attempt = wf.attempt(command.attempt_id)
    if attempt is None or attempt.status not in _STARTED:
        return Raced(Code.NOT_ELIGIBLE)
    step = wf.step_run(attempt.step_run_id or "")
    if step is None:
        return Raced(Code.NOT_ELIGIBLE)
    evidence = command.evidence
    if evidence is None:
        return Replayed(Code.EVIDENCE_REQUIRED)
    if isinstance(evidence, UnknownEvidence):
        return Rejected(Code(evidence.reason.value))
    if isinstance(evidence, LiveEvidence):
        return Replayed(Code.LIVE)
    if workflow_regressed(wf, observed_at_ms, attempt):
        return Rejected(Code.CLOCK_REGRESSION)
    tx = WorkflowTx.begin_workflow(wf, command.name, observed_at_ms)
    never_ran = not command.launched and attempt.executor_handle is None
    if isinstance(evidence, NotRunningEvidence) and never_ran:
        relaunch_task(tx, attempt, step)
        return tx.commit_workflow(Code.LOST)
    if isinstance(evidence, NotRunningEvidence):
        lost = Code.WORKFLOW_TASK_ATTEMPT_LOST.value
        finish_task(
            tx, wf, attempt, step, AttemptStatus.LOST, actor=Actor.RECONCILER,
            error_code=lost, retry=False,
        )  # fmt: skip
        return tx.commit_workflow(Code.LOST)
    assert isinstance(evidence, CompletedEvidence)
    started = evidence.started_at_ms
    if (
        evidence.callback_sequence != attempt.callback_sequence
        or (attempt.started_at_ms is not None and started != attempt.started_at_ms)
        or (started is not None and started < attempt.created_at_ms)
    ):
        return Rejected(Code.RECEIPT_CONFLICT)
    status = task_completion_status(wf, evidence.outcome)
    started_at = attempt.started_at_ms if attempt.started_at_ms is not None else started
    error = Code.EXECUTION_FAILED.value if status is AttemptStatus.FAILED else None
    finish_task(
        tx, wf, attempt, step, status, actor=Actor.RECONCILER, error_code=error,
        exit_code=evidence.exit_code, started_at_ms=started_at,
    )  # fmt: skip
    return tx.commit_workflow(Code.COMPLETED)
