"""The Workflow model's own reading of SPEC §4 (ADR-0229): an oracle independent of the kernel.

`WorkflowOracle` keeps a small mutable model of every Workflow the machine admitted (StepRun
statuses and epochs, the ledger keys `(step_run_id, version)`, Task Attempts with their callback
sequence and handle fact, the parent's status and cancellation intent, the time of its last
write) and predicts, for each Workflow command, whether it must apply and what the statuses are
afterwards. It is written from the SPEC text and the kernel's recorded decisions, never from the
kernel's code: nothing here imports `kernel.workflow` transitions, rules, contracts or
invariants (a planted bug there must not change the oracle too). Shared are only plain values:
the command dataclasses, enums, codes, evidence values and `workflow_task_attempt_id` (§4.6).

The rules encoded (each function names its SPEC row):

- §4.1 admission: `running`, one `pending` StepRun per step at epoch 1; the same Run id with
  the same digest is an exact replay (`replayed`), with another digest a refusal.
- §4.4 frontier (decision WF-2, B-62): `pending` -> `ready` when every dependency `succeeded`,
  `cancelled` when one ended otherwise (transitively within one pass); when every StepRun is
  final the parent ends `succeeded` (all succeeded) or `failed`. Never under an intent.
- §4.3 Task admission: generation-bound on `(step_run_id, v)`; the same key again is
  `replayed(existing)` whatever happened since (I-W1); another epoch, a StepRun not `ready`,
  not yet due, a parent not open: not applied.
- §4.3 dispatch (WF-04): prepare only the ledger's `claimed` Attempt of a StepRun exactly
  `ready` at the ledger version, parent `running` without intent; prepare -> `starting` /
  `running` and a new epoch.
- §4.4 execution rows: handle (`running`; the handle fact is the start time, §4.7), start
  failure, completion (decision R-27 under an intent), timeout; decision WF-3: a `failed` or
  `timed_out` Task with attempts left puts the StepRun back to `ready` at a new epoch (never
  under an intent); the parent never changes (I-W3).
- §4.4 phase 1 convergence: needs an intent; refused while a started Attempt's process was not
  stopped exactly; then every live Attempt, every StepRun not final and the parent take the
  intent's status (`timed_out` for a `timeout` reason, else `cancelled`).
- §4.5 recovery (WF-08; decisions WF-4 and B-63): a `claimed` Attempt is not a recovery
  candidate (it never ran and stays dispatchable); `starting`/`running`: a receipt is the
  outcome (as a completion), `live` adopts (nothing written), trusted `not_running` makes the
  Attempt `lost` and the StepRun `failed` (no new epoch for a started Task), `unknown` or no
  evidence writes nothing; never the parent.
- V-5 / WF-12: a command that would apply, observed before the Workflow's last write (or a
  recorded handle fact), is `rejected(CLOCK_REGRESSION)`; nothing else it may do writes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from kernel.commands import LocalReceipt
from kernel.evidence import CompletedEvidence, LiveEvidence, NotRunningEvidence, UnknownEvidence
from kernel.identity import workflow_task_attempt_id
from kernel.specs.codes import Code
from kernel.specs.states import AttemptStatus, CancelReason, CompletionOutcome, RunStatus
from kernel.specs.workflow import StepRunStatus
from kernel.workflow.commands import (
    AdmitTask,
    AdmitWorkflow,
    AdvanceFrontier,
    CompleteTask,
    ConvergeWorkflowCancel,
    FailTaskStart,
    PrepareTask,
    RecordTaskHandle,
    RecoverTaskStartup,
    RequestWorkflowCancel,
    TimeOutTask,
    WorkflowCommand,
)

__all__ = [
    "APPLIED",
    "NOT_APPLIED",
    "OAttempt",
    "OStep",
    "OWorkflow",
    "Prediction",
    "WorkflowOracle",
    "intent_final",
]

APPLIED: Final = frozenset({"applied"})
NOT_APPLIED: Final = frozenset({"replayed", "rejected", "raced"})
# The SPEC's own status sets, spelled out here rather than imported from the kernel.
_STEP_FINAL: Final = frozenset(
    {
        StepRunStatus.SUCCEEDED,
        StepRunStatus.FAILED,
        StepRunStatus.CANCELLED,
        StepRunStatus.TIMED_OUT,
    }
)
_ATTEMPT_FINAL: Final = frozenset(
    {
        AttemptStatus.SUCCEEDED,
        AttemptStatus.FAILED,
        AttemptStatus.CANCELLED,
        AttemptStatus.TIMED_OUT,
        AttemptStatus.LOST,
    }
)
_STARTED: Final = frozenset({AttemptStatus.STARTING, AttemptStatus.RUNNING})
_RETRYABLE: Final = frozenset({AttemptStatus.FAILED, AttemptStatus.TIMED_OUT})
_RUN_TERMINAL: Final = frozenset(
    {RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMED_OUT}
)


def intent_final(reason: CancelReason) -> RunStatus:
    """§1.9 / B-06: a `timeout` intent ends with `timed_out`, every other reason `cancelled`."""
    return RunStatus.TIMED_OUT if reason is CancelReason.TIMEOUT else RunStatus.CANCELLED


@dataclass(frozen=True, slots=True)
class Prediction:
    """What must happen: the allowed outcome kinds, the exact code where the SPEC names one,
    and why (for the failure message)."""

    kinds: frozenset[str]
    reason: str
    code: str | None = None

    @property
    def applies(self) -> bool:
        return self.kinds == APPLIED


def _applied(reason: str) -> Prediction:
    return Prediction(APPLIED, reason)


def _no(reason: str, *kinds: str, code: Code | None = None) -> Prediction:
    return Prediction(
        frozenset(kinds) if kinds else NOT_APPLIED, reason, None if code is None else code.value
    )


@dataclass(slots=True)
class OStep:
    key: str
    step_run_id: str
    deps: tuple[str, ...]
    max_attempts: int
    backoff_ms: int
    status: StepRunStatus = StepRunStatus.PENDING
    version: int = 1
    ready_at_ms: int | None = None
    started_at_ms: int | None = None
    admissions: int = 0


@dataclass(slots=True)
class OAttempt:
    attempt_id: str
    step_run_id: str
    version: int  # the ledger epoch it was admitted at
    number: int
    created_at_ms: int
    status: AttemptStatus = AttemptStatus.CLAIMED
    callback_sequence: int = 0
    token_sha256: str | None = None
    handle: str | None = None
    started_at_ms: int | None = None


@dataclass(slots=True)
class OWorkflow:
    run_id: str
    digest: str
    steps: dict[str, OStep]  # by step key, in plan order
    status: RunStatus = RunStatus.RUNNING
    intent: CancelReason | None = None
    attempts: dict[str, OAttempt] = field(default_factory=dict)
    ledger: dict[tuple[str, int], str] = field(default_factory=dict)  # key -> attempt id
    last_ms: int = 0  # the last write, or a recorded handle fact if later (V-5)

    def step_of(self, step_run_id: str) -> OStep | None:
        for step in self.steps.values():
            if step.step_run_id == step_run_id:
                return step
        return None

    @property
    def open(self) -> bool:
        return self.status is RunStatus.RUNNING and self.intent is None


class WorkflowOracle:
    """The model of every Workflow; `predict` answers on a copy, `commit` keeps it."""

    def __init__(self) -> None:
        self.workflows: dict[str, OWorkflow] = {}

    def predict(self, command: WorkflowCommand, now: int) -> tuple[Prediction, OWorkflow | None]:
        """The prediction and, when it applies, the model afterwards (not yet committed: a crash
        before commit drops it)."""
        current = self.workflows.get(command.run_id)
        wf = copy.deepcopy(current) if current is not None else None
        if isinstance(command, AdmitWorkflow):
            return _admit_workflow(wf, command, now)
        if wf is None:
            return _no("no such Workflow", "rejected", "raced"), None
        prediction = _PREDICTORS[type(command)](wf, command, now)
        if prediction.applies and now < wf.last_ms:
            # V-5 / WF-12: it would apply, but the observation is earlier than the last write.
            return _no("clock regression", "rejected", code=Code.CLOCK_REGRESSION), None
        if prediction.applies:
            wf.last_ms = max(wf.last_ms, now)
            return prediction, wf
        return prediction, None

    def commit(self, wf: OWorkflow) -> None:
        self.workflows[wf.run_id] = wf


# -- §4.1 admission and §4.4 frontier ----------------------------------------------------------
def _admit_workflow(
    wf: OWorkflow | None, command: AdmitWorkflow, now: int
) -> tuple[Prediction, OWorkflow | None]:
    if wf is not None:
        if wf.digest == command.plan_digest:
            return _no("exact admission replay", "replayed"), None
        return _no("another plan under the same Run id", "rejected"), None
    steps = {
        p.step_key: OStep(p.step_key, p.step_run_id, p.depends_on, p.max_attempts,
                          p.retry_backoff_ms)
        for p in command.steps
    }  # fmt: skip
    created = OWorkflow(command.run_id, command.plan_digest, steps, last_ms=now)
    return _applied("§4.1 admission"), created


def frontier_targets(wf: OWorkflow) -> dict[str, StepRunStatus]:
    """§4.4 / WF-2: what one frontier pass does to each `pending` StepRun (by step key)."""
    status = {key: step.status for key, step in wf.steps.items()}
    targets: dict[str, StepRunStatus] = {}
    changed = True
    while changed:
        changed = False
        for key, step in wf.steps.items():
            if status[key] is not StepRunStatus.PENDING:
                continue
            deps = [status[d] for d in step.deps]
            if all(d is StepRunStatus.SUCCEEDED for d in deps):
                target = StepRunStatus.READY
            elif any(d in _STEP_FINAL and d is not StepRunStatus.SUCCEEDED for d in deps):
                target = StepRunStatus.CANCELLED
            else:
                continue
            status[key] = targets[key] = target
            changed = True
    return targets


def _frontier(wf: OWorkflow, command: AdvanceFrontier, now: int) -> Prediction:
    if wf.status in _RUN_TERMINAL:
        return _no("WF-18: already ended (a lost response replayed)", "replayed")
    if not wf.open:
        return _no("the frontier skips a parent with a cancellation intent")
    targets = frontier_targets(wf)
    if not targets and not all(s.status in _STEP_FINAL for s in wf.steps.values()):
        return _no("nothing to promote")
    for key, target in targets.items():
        step = wf.steps[key]
        step.status = target
        step.version += 1
        if target is StepRunStatus.READY:
            step.ready_at_ms = now
    if all(s.status in _STEP_FINAL for s in wf.steps.values()):
        succeeded = all(s.status is StepRunStatus.SUCCEEDED for s in wf.steps.values())
        wf.status = RunStatus.SUCCEEDED if succeeded else RunStatus.FAILED
    return _applied("§4.4 frontier")


# -- §4.3 Task admission and dispatch ---------------------------------------------------------
def _admit_task(wf: OWorkflow, command: AdmitTask, now: int) -> Prediction:
    step = wf.step_of(command.step_run_id)
    if step is None:
        return _no("unknown StepRun", "rejected")
    if (command.step_run_id, command.step_run_version) in wf.ledger:
        return _no("§4.3 same (step_run_id, v): the existing entry", "replayed")
    if step.version != command.step_run_version:
        return _no("another epoch")
    due = step.ready_at_ms is None or step.ready_at_ms <= now
    if not (wf.open and step.status is StepRunStatus.READY and due):
        return _no("the StepRun is not ready and due, or the parent is not open")
    if step.admissions >= step.max_attempts:
        return _no("no attempts left")
    attempt_id = workflow_task_attempt_id(wf.digest, step.step_run_id, step.version)
    wf.attempts[attempt_id] = OAttempt(
        attempt_id, step.step_run_id, step.version, len(wf.attempts) + 1, now
    )
    wf.ledger[(step.step_run_id, step.version)] = attempt_id
    step.admissions += 1
    return _applied("§4.3 admission")


def _prepare(wf: OWorkflow, command: PrepareTask, now: int) -> Prediction:
    attempt = wf.attempts.get(command.attempt_id)
    if attempt is None:
        return _no("unknown Attempt", "rejected")
    step = wf.step_of(attempt.step_run_id)
    assert step is not None
    in_ledger = wf.ledger.get((attempt.step_run_id, attempt.version)) == attempt.attempt_id
    dispatchable = (
        in_ledger
        and attempt.status is AttemptStatus.CLAIMED
        and step.status is StepRunStatus.READY
        and step.version == attempt.version
        and wf.open
    )
    if not dispatchable:
        return _no("WF-04: not dispatchable")
    if command.callback_sequence <= attempt.callback_sequence:
        return _no("stale callback sequence", "rejected")
    attempt.status = AttemptStatus.STARTING
    attempt.callback_sequence = command.callback_sequence
    attempt.token_sha256 = command.callback_token_sha256
    step.status = StepRunStatus.RUNNING
    step.version += 1
    return _applied("§4.4 prepare")


# -- §4.4 execution ----------------------------------------------------------------------------
def _finish(
    wf: OWorkflow, attempt: OAttempt, status: AttemptStatus, now: int, *, retry: bool = True
) -> None:
    """One Task Attempt ends with `status`; its StepRun ends alike (`lost` -> `failed`, B-63),
    or, decision WF-3, goes back to `ready` at a new epoch with attempts left."""
    step = wf.step_of(attempt.step_run_id)
    assert step is not None
    attempt.status = status
    step.version += 1
    left = step.admissions < step.max_attempts
    if retry and status in _RETRYABLE and wf.intent is None and left:
        step.status = StepRunStatus.READY
        step.ready_at_ms = now + step.backoff_ms
        step.started_at_ms = None
        return
    step.status = (
        StepRunStatus.FAILED if status is AttemptStatus.LOST else StepRunStatus(status.value)
    )


def _under_intent(wf: OWorkflow, outcome: CompletionOutcome) -> AttemptStatus:
    """Decision R-27: under an intent, any outcome but `succeeded` takes the intent's status."""
    if outcome is CompletionOutcome.SUCCEEDED or wf.intent is None:
        return AttemptStatus(outcome.value)
    return AttemptStatus(intent_final(wf.intent).value)


def _task(wf: OWorkflow, attempt_id: str) -> OAttempt | Prediction:
    attempt = wf.attempts.get(attempt_id)
    if attempt is None:
        return _no("unknown Attempt", "rejected")
    if attempt.status in _ATTEMPT_FINAL:
        return _no("the Attempt already ended", "replayed")
    return attempt


def _record_handle(wf: OWorkflow, command: RecordTaskHandle, now: int) -> Prediction:
    attempt = wf.attempts.get(command.attempt_id)
    if attempt is None:
        return _no("unknown Attempt", "rejected")
    if attempt.status in _ATTEMPT_FINAL:
        return _no("the Attempt already ended", "replayed")
    if attempt.status is AttemptStatus.RUNNING:
        if attempt.handle == command.executor_handle:
            return _no("the same handle again", "replayed")
        return _no("another handle", "rejected")
    if attempt.status is not AttemptStatus.STARTING:
        return _no("not starting", "rejected")
    if command.started_at_ms < attempt.created_at_ms:
        return _no("WF-12: a start before the Attempt's creation", "rejected")
    step = wf.step_of(attempt.step_run_id)
    assert step is not None
    attempt.status = AttemptStatus.RUNNING
    attempt.handle = command.executor_handle
    attempt.started_at_ms = command.started_at_ms
    step.started_at_ms = command.started_at_ms
    step.version += 1
    wf.last_ms = max(wf.last_ms, command.started_at_ms)
    return _applied("§4.4 running (handle fact)")


def _fail_start(wf: OWorkflow, command: FailTaskStart, now: int) -> Prediction:
    attempt = _task(wf, command.attempt_id)
    if isinstance(attempt, Prediction):
        return attempt
    if attempt.status is not AttemptStatus.STARTING:
        return _no("a start failure needs a starting Attempt", "rejected")
    _finish(wf, attempt, AttemptStatus.FAILED, now)
    return _applied("§4.4 start failure")


def receipt_authentic(attempt: OAttempt, receipt: LocalReceipt) -> bool:
    """L3 for a Task Attempt: ids, sequence, digest and (§4.7) the recorded handle fact."""
    return (
        attempt.token_sha256 is not None
        and receipt.attempt_id == attempt.attempt_id
        and receipt.callback_sequence == attempt.callback_sequence
        and receipt.token_sha256 == attempt.token_sha256
        and (attempt.started_at_ms is None or receipt.started_at_ms == attempt.started_at_ms)
    )


def _complete(wf: OWorkflow, command: CompleteTask, now: int) -> Prediction:
    attempt = wf.attempts.get(command.attempt_id)
    if attempt is None:
        return _no("unknown Attempt", "rejected")
    if command.receipt.run_id != wf.run_id or not receipt_authentic(attempt, command.receipt):
        return _no("an unauthenticated receipt", "rejected")
    if attempt.status in _ATTEMPT_FINAL:
        return _no("the Attempt already ended", "replayed")
    if attempt.status not in _STARTED:
        return _no("completion needs a started Attempt", "rejected")
    if command.receipt.started_at_ms < attempt.created_at_ms:
        return _no("WF-12: a start before the Attempt's creation", "rejected")
    if attempt.started_at_ms is None:  # WF-7: a receipt before the handle fact (as L3)
        attempt.started_at_ms = command.receipt.started_at_ms
        wf.last_ms = max(wf.last_ms, command.receipt.started_at_ms)
    _finish(wf, attempt, _under_intent(wf, command.receipt.outcome), now)
    return _applied("§4.4 completion")


def _time_out(wf: OWorkflow, command: TimeOutTask, now: int) -> Prediction:
    attempt = _task(wf, command.attempt_id)
    if isinstance(attempt, Prediction):
        return attempt
    if attempt.status is not AttemptStatus.RUNNING:
        return _no("a timeout needs a running Attempt", "rejected")
    _finish(wf, attempt, AttemptStatus.TIMED_OUT, now)
    return _applied("§4.4 timeout")


# -- §4.4 phase 1 ------------------------------------------------------------------------------
def _request_cancel(wf: OWorkflow, command: RequestWorkflowCancel, now: int) -> Prediction:
    if wf.status in _RUN_TERMINAL or wf.intent is not None:
        return _no("already terminal or already requested", "replayed")
    wf.intent = command.reason
    return _applied("§1.9 intent")


def _converge(wf: OWorkflow, command: ConvergeWorkflowCancel, now: int) -> Prediction:
    if wf.status in _RUN_TERMINAL:
        return _no("WF-18: already ended (a lost response replayed)", "replayed")
    if wf.intent is None:
        return _no("no intent", "rejected")
    stopped = set(command.stopped_attempt_ids)
    if any(a not in wf.attempts for a in stopped):
        return _no("an unknown stopped Attempt", "rejected")
    if any(a.status in _STARTED and a.attempt_id not in stopped for a in wf.attempts.values()):
        return _no("WF-16: a started process was not stopped", "rejected")
    final = intent_final(wf.intent)
    for attempt in wf.attempts.values():
        if attempt.status not in _ATTEMPT_FINAL:
            attempt.status = AttemptStatus(final.value)
    for step in wf.steps.values():
        if step.status not in _STEP_FINAL:
            step.status = StepRunStatus(final.value)
            step.version += 1
    wf.status = final
    return _applied("§4.4 convergence")


# -- §4.5 recovery -----------------------------------------------------------------------------
def _recover(wf: OWorkflow, command: RecoverTaskStartup, now: int) -> Prediction:
    attempt = wf.attempts.get(command.attempt_id)
    if attempt is None or attempt.status not in _STARTED:
        # Decision WF-4: a `claimed` Task Attempt never ran and stays dispatchable.
        return _no("not a started Attempt: not a recovery candidate", "raced")
    evidence = command.evidence
    if evidence is None or isinstance(evidence, LiveEvidence):
        return _no("adopt / evidence required: nothing written", "replayed")
    if isinstance(evidence, UnknownEvidence):
        return _no("WF-08: unknown fails closed", "rejected")
    if isinstance(evidence, NotRunningEvidence) and not command.launched and attempt.handle is None:
        # WF-6: prepared but never launched: nothing ran; a new ready epoch, not counted.
        step = wf.step_of(attempt.step_run_id)
        assert step is not None
        attempt.status = AttemptStatus.LOST
        step.status = StepRunStatus.READY
        step.version += 1
        step.admissions -= 1
        step.ready_at_ms = now
        return _applied("§4.5 never launched: lost, a new ready epoch")
    if isinstance(evidence, NotRunningEvidence):
        _finish(wf, attempt, AttemptStatus.LOST, now, retry=False)
        return _applied("§4.5 not running: lost, StepRun failed")
    assert isinstance(evidence, CompletedEvidence)
    started = evidence.started_at_ms
    if (
        evidence.callback_sequence != attempt.callback_sequence
        or (attempt.started_at_ms is not None and started != attempt.started_at_ms)
        or (started is not None and started < attempt.created_at_ms)
    ):
        return _no("a receipt that disagrees with the Attempt", "rejected")
    if attempt.started_at_ms is None and started is not None:
        attempt.started_at_ms = started
        wf.last_ms = max(wf.last_ms, started)
    _finish(wf, attempt, _under_intent(wf, evidence.outcome), now)
    return _applied("§4.5 receipt first")


_PREDICTORS: Final[dict[type, Callable[[OWorkflow, Any, int], Prediction]]] = {
    AdvanceFrontier: _frontier,
    AdmitTask: _admit_task,
    PrepareTask: _prepare,
    RecordTaskHandle: _record_handle,
    FailTaskStart: _fail_start,
    CompleteTask: _complete,
    TimeOutTask: _time_out,
    RequestWorkflowCancel: _request_cancel,
    ConvergeWorkflowCancel: _converge,
    RecoverTaskStartup: _recover,
}
