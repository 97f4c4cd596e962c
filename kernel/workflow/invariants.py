"""Workflow invariants I-W1..I-W6 (SPEC §4.9) and the shape rules they rest on, as predicates
over one `WorkflowAggregate` (checked by the contracts on every transition and by the models
after every step).

Several Task Attempts of one Workflow may be live at once (one per StepRun), so the ordinary
I-1 "one live Attempt, the latest" is replaced here by "one live Attempt per StepRun".
"""

from __future__ import annotations

from collections.abc import Callable

from kernel.identity import (
    PORTABLE_ID_RE,
    WORKFLOW_TASK_ATTEMPT_ID_RE,
    workflow_admission_event_id,
    workflow_task_attempt_id,
)
from kernel.specs.invariants import Violation, i8_no_automatic_retry_link, time_order
from kernel.specs.states import FINAL_ATTEMPT_STATUSES, AttemptStatus, RunKind, RunStatus
from kernel.specs.workflow import FINAL_STEP_STATUSES, StepRunStatus
from kernel.workflow.entities import WorkflowAggregate

__all__ = [
    "WORKFLOW_INVARIANTS",
    "check_workflow_invariants",
    "workflow_finality",
]

_STARTED = frozenset({AttemptStatus.STARTING, AttemptStatus.RUNNING})


def _v(name: str, wf: WorkflowAggregate, detail: str) -> Violation:
    return Violation(name, wf.run.run_id, detail)


def shape(wf: WorkflowAggregate) -> list[Violation]:
    """The aggregate is one Workflow: kind, admission, StepRuns and Attempts of this Run,
    Attempt numbers 1..N, unique ids, dependencies inside the plan."""
    out: list[Violation] = []
    run = wf.run
    if run.kind is not RunKind.WORKFLOW:
        out.append(_v("W-SHAPE", wf, "the Run of a Workflow aggregate is not kind=workflow"))
    if wf.admission.run_id != run.run_id or wf.admission.step_count != len(wf.step_runs):
        out.append(_v("W-SHAPE", wf, "admission does not match the Run or its StepRuns"))
    keys = [s.step_key for s in wf.step_runs]
    if len(set(keys)) != len(keys) or [s.ordinal for s in wf.step_runs] != list(
        range(1, len(keys) + 1)
    ):
        out.append(_v("W-SHAPE", wf, "StepRun keys not unique or ordinals not 1..N"))
    for step in wf.step_runs:
        if step.run_id != run.run_id:
            out.append(_v("W-SHAPE", wf, f"StepRun {step.step_run_id} of another Run"))
        if not set(step.depends_on) <= set(keys) or step.step_key in step.depends_on:
            out.append(_v("W-SHAPE", wf, f"StepRun {step.step_key} depends outside the plan"))
        if step.version < 1:
            out.append(_v("W-SHAPE", wf, f"StepRun {step.step_key} epoch < 1"))
    numbers = [a.number for a in wf.attempts]
    if numbers != list(range(1, len(numbers) + 1)):
        out.append(_v("I-1", wf, f"attempt numbers {numbers} are not 1..N"))
    ids = [a.attempt_id for a in wf.attempts]
    if len(set(ids)) != len(ids):
        out.append(_v("I-1", wf, "duplicate attempt ids"))
    for attempt in wf.attempts:
        if attempt.run_id != run.run_id or wf.step_run(attempt.step_run_id or "") is None:
            out.append(_v("W-SHAPE", wf, f"attempt {attempt.attempt_id} is not a Task Attempt"))
    if wf.core.policy is not None or wf.core.leases:
        out.append(_v("W-SHAPE", wf, "a Workflow holds no retry policy or lease rows"))
    return out


def iw1_one_admission_per_epoch(wf: WorkflowAggregate) -> list[Violation]:
    """I-W1: at most one ledger entry and one Attempt per `(step_run_id, step_run_version)`;
    every Task Attempt has exactly its ledger entry, and the entry's facts are the Attempt's."""
    out: list[Violation] = []
    keys = [(e.step_run_id, e.step_run_version) for e in wf.ledger]
    if len(set(keys)) != len(keys):
        out.append(_v("I-W1", wf, "two ledger entries for one StepRun epoch"))
    by_attempt = {e.attempt_id: e for e in wf.ledger}
    if len(by_attempt) != len(wf.ledger) or set(by_attempt) != {a.attempt_id for a in wf.attempts}:
        out.append(_v("I-W1", wf, "ledger entries and Task Attempts are not one to one"))
    for attempt in wf.attempts:
        entry = by_attempt.get(attempt.attempt_id)
        if entry is None:
            continue
        step = wf.step_run(entry.step_run_id)
        if (
            entry.step_run_id != attempt.step_run_id
            or entry.attempt_number != attempt.number
            or entry.run_id != wf.run.run_id
            or entry.plan_digest != wf.admission.plan_digest
            or step is None
            or (entry.task_id, entry.task_revision, entry.executor_type)
            != (step.task_id, step.task_revision, step.executor_type)
            or entry.step_run_version > step.version
        ):
            out.append(_v("I-W1", wf, f"ledger entry of {attempt.attempt_id} disagrees"))
    return out


def iw2_dispatch_shape(wf: WorkflowAggregate) -> list[Violation]:
    """I-W2 as a state rule: a StepRun has at most one live Task Attempt; `running` has exactly
    one started one; `ready` has none started and at most the `claimed` one of its current
    epoch; `pending` has none; a final StepRun has no live Attempt."""
    out: list[Violation] = []
    for step in wf.step_runs:
        attempts = wf.attempts_of(step.step_run_id)
        live = [a for a in attempts if a.status not in FINAL_ATTEMPT_STATUSES]
        started = [a for a in live if a.status in _STARTED]
        claimed = [a for a in live if a.status is AttemptStatus.CLAIMED]
        if len(live) > 1:
            out.append(_v("I-W2", wf, f"StepRun {step.step_key} has {len(live)} live attempts"))
        if step.status is StepRunStatus.RUNNING and len(started) != 1:
            out.append(_v("I-W2", wf, f"running StepRun {step.step_key} without its execution"))
        if step.status is StepRunStatus.READY:
            if started:
                out.append(_v("I-W2", wf, f"ready StepRun {step.step_key} has a started attempt"))
            for attempt in claimed:
                entry = wf.admission_of(attempt.attempt_id)
                if entry is None or entry.step_run_version != step.version:
                    out.append(_v("I-W2", wf, f"{attempt.attempt_id} of a past epoch is claimed"))
        if step.status is StepRunStatus.PENDING and attempts:
            out.append(_v("I-W2", wf, f"pending StepRun {step.step_key} has attempts"))
        if step.status in FINAL_STEP_STATUSES and live:
            out.append(_v("I-W2", wf, f"final StepRun {step.step_key} has a live attempt"))
    return out


def iw3_parent_status(wf: WorkflowAggregate) -> list[Violation]:
    """I-W3: while not terminal the parent is `running`; once terminal every StepRun is final,
    with the status the frontier aggregation or the convergence gives (B-62)."""
    run = wf.run
    steps = wf.step_runs
    if not run.status.terminal:
        if run.status is not RunStatus.RUNNING:
            return [_v("I-W3", wf, f"non-terminal Workflow is {run.status}")]
        return []
    if any(not s.status.final for s in steps):
        return [_v("I-W3", wf, "terminal Workflow with a StepRun not final")]
    if run.status is RunStatus.SUCCEEDED and any(
        s.status is not StepRunStatus.SUCCEEDED for s in steps
    ):
        return [_v("I-W3", wf, "succeeded Workflow with a StepRun not succeeded")]
    if run.status in (RunStatus.CANCELLED, RunStatus.TIMED_OUT) and not run.has_cancel_intent:
        return [_v("I-W3", wf, "cancelled Workflow without a cancellation intent")]
    if run.status is RunStatus.FAILED and all(s.status is StepRunStatus.SUCCEEDED for s in steps):
        return [_v("I-W3", wf, "failed Workflow whose StepRuns all succeeded")]
    return []


def iw5_start_times(wf: WorkflowAggregate) -> list[Violation]:
    """I-W5: a `running` StepRun's `started_at_ms` is its live Task Attempt's (the handle fact,
    or None before the handle); a StepRun never has a start time without a started Attempt."""
    out: list[Violation] = []
    for step in wf.step_runs:
        attempts = wf.attempts_of(step.step_run_id)
        live = [a for a in attempts if a.status in _STARTED]
        running = step.status is StepRunStatus.RUNNING and bool(live)
        if running and live[-1].started_at_ms != step.started_at_ms:
            out.append(_v("I-W5", wf, f"StepRun {step.step_key} start time differs"))
        started = [a for a in attempts if a.started_at_ms is not None]
        if step.started_at_ms is not None and not started:
            out.append(_v("I-W5", wf, f"StepRun {step.step_key} started without an attempt"))
    return out


def iw6_attempt_ids(wf: WorkflowAggregate) -> list[Violation]:
    """I-W6 (with WF-10): every Task Attempt id is `wta:` + 32 lowercase hex, portable, and the
    derivation from its ledger entry; the admission Event id is `wte:` + the same hex."""
    out: list[Violation] = []
    for entry in wf.ledger:
        derived = workflow_task_attempt_id(
            wf.admission.plan_digest, entry.step_run_id, entry.step_run_version
        )
        if (
            not WORKFLOW_TASK_ATTEMPT_ID_RE.fullmatch(entry.attempt_id)
            or not PORTABLE_ID_RE.fullmatch(entry.attempt_id)
            or entry.attempt_id != derived
            or entry.event_id
            != workflow_admission_event_id(
                wf.admission.plan_digest, entry.step_run_id, entry.step_run_version
            )
        ):
            out.append(_v("I-W6", wf, f"Task Attempt id {entry.attempt_id} is not derived"))
    return out


def run_rules(wf: WorkflowAggregate) -> list[Violation]:
    """The Run rules that hold for Workflows as for ordinary Runs (I-8, V-1, V-5)."""
    return [*i8_no_automatic_retry_link(wf.core), *time_order(wf.core)]


WORKFLOW_INVARIANTS: tuple[Callable[[WorkflowAggregate], list[Violation]], ...] = (
    shape,
    iw1_one_admission_per_epoch,
    iw2_dispatch_shape,
    iw3_parent_status,
    iw5_start_times,
    iw6_attempt_ids,
    run_rules,
)


def check_workflow_invariants(wf: WorkflowAggregate) -> list[Violation]:
    """Every Workflow state invariant; I-W4 (all-or-nothing) is a property of `WorkflowApplied`
    and of the runners' single transaction, checked by the contracts and the conformance kill
    mode."""
    out: list[Violation] = []
    for predicate in WORKFLOW_INVARIANTS:
        out.extend(predicate(wf))
    return out


def workflow_finality(before: WorkflowAggregate, after: WorkflowAggregate) -> list[Violation]:
    """I-5 for Workflows: final Attempts, final StepRuns, ledger entries and the admission never
    change; nothing is removed; a terminal parent never changes."""
    out: list[Violation] = []
    for attempt in before.attempts:
        now = after.attempt(attempt.attempt_id)
        if now is None or (attempt.status in FINAL_ATTEMPT_STATUSES and now != attempt):
            out.append(_v("I-5", before, f"final attempt {attempt.attempt_id} changed"))
    for step in before.step_runs:
        later = after.step_run(step.step_run_id)
        if later is None or (step.status.final and later != step):
            out.append(_v("I-5", before, f"final StepRun {step.step_key} changed"))
        elif later.version < step.version:
            out.append(_v("I-5", before, f"StepRun {step.step_key} epoch went back"))
    if after.ledger[: len(before.ledger)] != before.ledger or after.admission != before.admission:
        out.append(_v("I-W1", before, "the ledger or the admission changed"))
    if before.run.status.terminal and after.run != before.run:
        out.append(_v("I-5", before, "terminal Workflow Run changed"))
    return out
