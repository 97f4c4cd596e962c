"""Commands of a Workflow (SPEC §4): frozen values that validate their own shape.

As for Runs (`kernel.commands`), a malformed command raises `CommandError` naming the field when
it is built; every domain refusal is a returned value. Ids are inputs (the caller draws the Run
and StepRun ids); the Task Attempt id is not: it is derived from the admission inputs (§4.6,
WF-10), so a replayed admission recomputes the same one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Final

from kernel.commands import (
    CommandError,
    LocalReceipt,
    _check_evidence,
    _int,
    _portable,
    _str,
)
from kernel.evidence import Evidence
from kernel.identity import is_sha256_hex
from kernel.specs.limits import MAX_ATTEMPTS_MAX, MAX_ATTEMPTS_MIN
from kernel.specs.states import Actor, CancelReason
from kernel.workflow.plan import PLAN_STEPS_MAX, STEP_KEY_RE

__all__ = [
    "MAX_WORKFLOW_STEPS",
    "AdmitTask",
    "AdmitWorkflow",
    "AdvanceFrontier",
    "CompleteTask",
    "ConvergeWorkflowCancel",
    "FailTaskStart",
    "PinnedStep",
    "PrepareTask",
    "RecordTaskHandle",
    "RecoverTaskStartup",
    "RequestWorkflowCancel",
    "TimeOutTask",
    "WorkflowCommand",
]

#: §4.1: the steps of one Workflow, as the plan allows (a frontier step reads all of one
#: Workflow's StepRuns in one transaction, so the count is bounded).
MAX_WORKFLOW_STEPS: Final = PLAN_STEPS_MAX
_RETRY_BACKOFF_MAX_MS: Final = 86_400_000


def _sha256(value: object, field: str) -> None:
    if not isinstance(value, str) or not is_sha256_hex(value):
        raise CommandError(field, "must be 64 lowercase hex characters")


@dataclass(frozen=True, slots=True)
class PinnedStep:
    """One plan step as admitted: its StepRun id (an input) and the Task revision it pins."""

    step_key: str
    step_run_id: str
    task_id: str
    task_revision: int
    executor_type: str
    depends_on: tuple[str, ...] = ()
    max_attempts: int = 1
    retry_backoff_ms: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.step_key, str) or not STEP_KEY_RE.fullmatch(self.step_key):
            raise CommandError("step_key", "must match [a-z0-9][a-z0-9_-]{0,31}")
        _portable(self.step_run_id, "step_run_id")
        _portable(self.task_id, "task_id")
        _int(self.task_revision, "task_revision", 1)
        _str(self.executor_type, "executor_type", 128)
        if not isinstance(self.depends_on, tuple) or list(self.depends_on) != sorted(
            set(self.depends_on)
        ):
            raise CommandError("depends_on", "must be a sorted tuple without duplicates")
        if self.step_key in self.depends_on:
            raise CommandError("depends_on", "a step cannot depend on itself")
        _int(self.max_attempts, "max_attempts", MAX_ATTEMPTS_MIN)
        if self.max_attempts > MAX_ATTEMPTS_MAX:
            raise CommandError("max_attempts", f"must be <= {MAX_ATTEMPTS_MAX}")
        _int(self.retry_backoff_ms, "retry_backoff_ms")
        if self.retry_backoff_ms > _RETRY_BACKOFF_MAX_MS:
            raise CommandError("retry_backoff_ms", f"must be <= {_RETRY_BACKOFF_MAX_MS}")


def _acyclic(steps: tuple[PinnedStep, ...]) -> bool:
    keys = {s.step_key: s for s in steps}
    state: dict[str, int] = {}

    def visit(key: str) -> bool:
        mark = state.get(key, 0)
        if mark == 1:
            return False
        if mark == 2:
            return True
        state[key] = 1
        ok = all(visit(dep) for dep in keys[key].depends_on)
        state[key] = 2
        return ok

    return all(visit(s.step_key) for s in steps)


@dataclass(frozen=True, slots=True)
class AdmitWorkflow:
    """§4.1: create the Workflow Run (`running`), its immutable admission and one `pending`
    StepRun per step. Exact replay (same Run id, same plan digest) is `Replayed(EXISTING)`."""

    name: ClassVar[str] = "admit_workflow"
    run_id: str
    project_id: str
    plan_name: str
    plan_digest: str
    steps: tuple[PinnedStep, ...]
    actor: Actor = Actor.USER

    def __post_init__(self) -> None:
        _portable(self.run_id, "run_id")
        _portable(self.project_id, "project_id")
        _portable(self.plan_name, "plan_name")
        _sha256(self.plan_digest, "plan_digest")
        if not isinstance(self.steps, tuple) or not 1 <= len(self.steps) <= MAX_WORKFLOW_STEPS:
            raise CommandError("steps", f"must be a tuple of 1..{MAX_WORKFLOW_STEPS} steps")
        if not all(isinstance(s, PinnedStep) for s in self.steps):
            raise CommandError("steps", "must hold PinnedStep values")
        keys = [s.step_key for s in self.steps]
        ids = [s.step_run_id for s in self.steps]
        if len(set(keys)) != len(keys):
            raise CommandError("steps", "step keys must be unique")
        if len(set(ids)) != len(ids) or self.run_id in ids:
            raise CommandError("steps", "step_run_ids must be unique and differ from the run_id")
        for step in self.steps:
            for dep in step.depends_on:
                if dep not in keys:
                    raise CommandError("steps", f"step {step.step_key} depends on unknown {dep}")
        if not _acyclic(self.steps):
            raise CommandError("steps", "the dependencies form a cycle")
        if not isinstance(self.actor, Actor):
            raise CommandError("actor", "must be an Actor")


@dataclass(frozen=True, slots=True)
class AdvanceFrontier:
    """§4.4 frontier: `pending` StepRuns whose dependencies succeeded become `ready`; those with
    a dependency ended otherwise become `cancelled`; all final -> the parent's terminal status."""

    name: ClassVar[str] = "advance_frontier"
    run_id: str

    def __post_init__(self) -> None:
        _portable(self.run_id, "run_id")


@dataclass(frozen=True, slots=True)
class AdmitTask:
    """§4.3: generation-bound Task Attempt admission for the StepRun `step_run_id` exactly at
    epoch `step_run_version`."""

    name: ClassVar[str] = "admit_task"
    run_id: str
    step_run_id: str
    step_run_version: int

    def __post_init__(self) -> None:
        _portable(self.run_id, "run_id")
        _portable(self.step_run_id, "step_run_id")
        _int(self.step_run_version, "step_run_version", 1)


@dataclass(frozen=True, slots=True)
class _TaskCommand:
    name: ClassVar[str]
    run_id: str
    attempt_id: str

    def _ids(self) -> None:
        _portable(self.run_id, "run_id")
        _portable(self.attempt_id, "attempt_id")


@dataclass(frozen=True, slots=True)
class PrepareTask(_TaskCommand):
    """§4.4 prepare (the local activation, before the spawn): commits the callback digest."""

    name: ClassVar[str] = "prepare_task"
    run_id: str
    attempt_id: str
    local_executor_type: str
    callback_sequence: int
    callback_token_sha256: str

    def __post_init__(self) -> None:
        self._ids()
        _str(self.local_executor_type, "local_executor_type", 128)
        _int(self.callback_sequence, "callback_sequence", 1)
        _sha256(self.callback_token_sha256, "callback_token_sha256")


@dataclass(frozen=True, slots=True)
class RecordTaskHandle(_TaskCommand):
    """§4.4 running: the durable handle and its start time (the handle fact, §4.7)."""

    name: ClassVar[str] = "record_task_handle"
    run_id: str
    attempt_id: str
    executor_handle: str
    started_at_ms: int

    def __post_init__(self) -> None:
        self._ids()
        _str(self.executor_handle, "executor_handle", 512)
        _int(self.started_at_ms, "started_at_ms")


@dataclass(frozen=True, slots=True)
class FailTaskStart(_TaskCommand):
    """§4.4 start failure: the spawn was refused, so nothing ran."""

    name: ClassVar[str] = "fail_task_start"
    run_id: str
    attempt_id: str

    def __post_init__(self) -> None:
        self._ids()


@dataclass(frozen=True, slots=True)
class CompleteTask(_TaskCommand):
    """§4.4 completion: the authenticated receipt's outcome (as L3)."""

    name: ClassVar[str] = "complete_task"
    run_id: str
    attempt_id: str
    receipt: LocalReceipt

    def __post_init__(self) -> None:
        self._ids()
        if not isinstance(self.receipt, LocalReceipt):
            raise CommandError("receipt", "must be a LocalReceipt")


@dataclass(frozen=True, slots=True)
class TimeOutTask(_TaskCommand):
    """§4.4 timeout, issued only after the process is stopped."""

    name: ClassVar[str] = "time_out_task"
    run_id: str
    attempt_id: str

    def __post_init__(self) -> None:
        self._ids()


@dataclass(frozen=True, slots=True)
class RequestWorkflowCancel:
    """§1.9 on a Workflow: persist the cancellation intent that phase 1 converges (§4.4)."""

    name: ClassVar[str] = "request_workflow_cancel"
    run_id: str
    reason: CancelReason = CancelReason.USER
    actor: Actor = Actor.USER

    def __post_init__(self) -> None:
        _portable(self.run_id, "run_id")
        if not isinstance(self.reason, CancelReason):
            raise CommandError("reason", "must be a CancelReason")
        if not isinstance(self.actor, Actor):
            raise CommandError("actor", "must be an Actor")


@dataclass(frozen=True, slots=True)
class ConvergeWorkflowCancel:
    """§4.4 phase 1: converge a Workflow with a cancellation intent. `stopped_attempt_ids` are
    the started Task Attempts whose processes execution control stopped exactly (§4.8); every
    started Attempt must be among them."""

    name: ClassVar[str] = "converge_workflow_cancel"
    run_id: str
    stopped_attempt_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _portable(self.run_id, "run_id")
        if not isinstance(self.stopped_attempt_ids, tuple):
            raise CommandError("stopped_attempt_ids", "must be a tuple")
        for attempt_id in self.stopped_attempt_ids:
            _portable(attempt_id, "stopped_attempt_ids")


@dataclass(frozen=True, slots=True)
class RecoverTaskStartup(_TaskCommand):
    """§4.5: resolve one Task Attempt at startup. `evidence` is required for a started Attempt
    (receipt first, then two inspections, §2.1) and ignored for a `claimed` one. `launched`:
    whether the launcher registered this Attempt's launch (its spawn journal line, durable
    before the command is ever sent, D-1) or a handle was recorded; `False` proves that nothing
    ran (`kernel.workflow.task_launched` computes it)."""

    name: ClassVar[str] = "recover_task_startup"
    run_id: str
    attempt_id: str
    evidence: Evidence | None = None
    launched: bool = True

    def __post_init__(self) -> None:
        self._ids()
        if self.evidence is not None:
            _check_evidence(self.evidence)
        if not isinstance(self.launched, bool):
            raise CommandError("launched", "must be a boolean")


WorkflowCommand = (
    AdmitWorkflow
    | AdvanceFrontier
    | AdmitTask
    | PrepareTask
    | RecordTaskHandle
    | FailTaskStart
    | CompleteTask
    | TimeOutTask
    | RequestWorkflowCancel
    | ConvergeWorkflowCancel
    | RecoverTaskStartup
)
