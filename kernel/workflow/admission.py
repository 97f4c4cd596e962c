"""Workflow admission (§4.1) and generation-bound Task Attempt admission (§4.3, WF-10, I-W1)."""

from __future__ import annotations

from kernel.entities import Attempt, Run
from kernel.identity import workflow_admission_event_id, workflow_task_attempt_id
from kernel.outcomes import Raced, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.states import Actor, AttemptStatus, RunKind, RunOwner, RunStatus
from kernel.specs.workflow import WORKFLOW_EXECUTOR_TYPE, StepRunStatus
from kernel.workflow.commands import AdmitTask, AdmitWorkflow
from kernel.workflow.contracts import workflow_transition
from kernel.workflow.entities import StepRun, TaskAdmission, WorkflowAdmission, WorkflowAggregate
from kernel.workflow.outcomes import WorkflowOutcome
from kernel.workflow.rules import admission_due, workflow_regressed
from kernel.workflow.transaction import WorkflowTx

__all__ = ["admit_task", "admit_workflow"]


@workflow_transition
def admit_workflow(
    aggregate: WorkflowAggregate | None, command: AdmitWorkflow, observed_at_ms: int
) -> WorkflowOutcome:
    """§4.1: the Workflow Run (`running`, no Attempt of its own), its immutable admission and
    one `pending` StepRun per step, in one transaction. The same Run id again with the same plan
    digest is an exact replay; with another digest it is refused."""
    if aggregate is not None:
        if aggregate.admission.plan_digest == command.plan_digest:
            return Replayed(Code.EXISTING)
        return Rejected(Code.WORKFLOW_PLAN_CONFLICT)
    run = Run(
        run_id=command.run_id,
        project_id=command.project_id,
        task_id=command.plan_name,
        task_revision=1,
        executor_type=WORKFLOW_EXECUTOR_TYPE,
        kind=RunKind.WORKFLOW,
        owner=RunOwner.RUNTIME,
        status=RunStatus.RUNNING,
        version=0,
        event_seq=0,
        created_at_ms=observed_at_ms,
        updated_at_ms=observed_at_ms,
        queued_at_ms=observed_at_ms,
    )
    admission = WorkflowAdmission(
        run_id=command.run_id,
        plan_name=command.plan_name,
        plan_digest=command.plan_digest,
        step_count=len(command.steps),
        admitted_at_ms=observed_at_ms,
    )
    tx = WorkflowTx.create_workflow(run, admission, command.name, observed_at_ms)
    for ordinal, pin in enumerate(command.steps, start=1):
        tx.insert_step(
            StepRun(
                step_run_id=pin.step_run_id,
                run_id=command.run_id,
                step_key=pin.step_key,
                ordinal=ordinal,
                task_id=pin.task_id,
                task_revision=pin.task_revision,
                executor_type=pin.executor_type,
                depends_on=pin.depends_on,
                max_attempts=pin.max_attempts,
                retry_backoff_ms=pin.retry_backoff_ms,
                status=StepRunStatus.PENDING,
                version=1,
                created_at_ms=observed_at_ms,
                updated_at_ms=observed_at_ms,
            )
        )
    tx.event(
        "workflow.admitted",
        command.actor,
        payload=(("plan_digest", command.plan_digest), ("steps", len(command.steps))),
    )
    return tx.commit_workflow(Code.ADMITTED)


@workflow_transition
def admit_task(
    aggregate: WorkflowAggregate | None, command: AdmitTask, observed_at_ms: int
) -> WorkflowOutcome:
    """§4.3: for a `ready` StepRun at epoch `v`, the ledger entry and the `claimed` Attempt
    keyed by `(step_run_id, v)`, with the deterministic `wta:` id (§4.6). Again for the same
    `(step_run_id, v)`: `Replayed(EXISTING)`, never a second Attempt (I-W1), whatever happened
    since."""
    if aggregate is None or aggregate.run.run_id != command.run_id:
        return Rejected(Code.RUN_NOT_FOUND)
    wf = aggregate
    step = wf.step_run(command.step_run_id)
    if step is None:
        return Rejected(Code.STEP_RUN_NOT_FOUND)
    if wf.admission_for(step.step_run_id, command.step_run_version) is not None:
        return Replayed(Code.EXISTING)
    if step.version != command.step_run_version:
        return Raced(Code.STEP_RUN_EPOCH_MISMATCH)
    if wf.run.has_cancel_intent:
        return Rejected(Code.CANCEL_REQUESTED)
    if not admission_due(wf, step, observed_at_ms):
        return Raced(Code.NOT_ELIGIBLE)
    if workflow_regressed(wf, observed_at_ms):
        return Rejected(Code.CLOCK_REGRESSION)
    digest = wf.admission.plan_digest
    attempt_id = workflow_task_attempt_id(digest, step.step_run_id, step.version)
    if wf.attempt(attempt_id) is not None:  # a different epoch cannot derive it (WF-10)
        return Rejected(Code.ATTEMPT_ID_CONFLICT)
    number = len(wf.attempts) + 1
    event_id = workflow_admission_event_id(digest, step.step_run_id, step.version)
    tx = WorkflowTx.begin_workflow(wf, command.name, observed_at_ms)
    tx.insert_attempt(
        Attempt(
            attempt_id=attempt_id,
            run_id=wf.run.run_id,
            number=number,
            status=AttemptStatus.CLAIMED,
            executor_type=step.executor_type,
            created_at_ms=observed_at_ms,
            step_run_id=step.step_run_id,
        )
    )
    tx.insert_admission(
        TaskAdmission(
            attempt_id=attempt_id,
            run_id=wf.run.run_id,
            step_run_id=step.step_run_id,
            step_run_version=step.version,
            plan_digest=digest,
            task_id=step.task_id,
            task_revision=step.task_revision,
            executor_type=step.executor_type,
            attempt_number=number,
            event_id=event_id,
            admitted_at_ms=observed_at_ms,
        )
    )
    tx.event(
        "task.admitted",
        Actor.SCHEDULER,
        attempt_id,
        payload=(("step_key", step.step_key), ("step_run_version", step.version)),
        step_run_id=step.step_run_id,
        event_id=event_id,
    )
    return tx.commit_workflow(Code.ADMITTED)
