"""Local Workflows (SPEC §4, ADR-0229): the pure model, and the facade runners import.

- `plan`: the Workflow plan a user writes (`WorkflowPlan`, `PlanStep`), its validation from a
  decoded TOML file (`plan_from_mapping`, refusing with `PlanError`), its digest and the
  deterministic topological order of its steps (§4.1 plan admission).
- `entities`, `commands`, `effects`, `outcomes`: the Workflow aggregate (Run, Task Attempts,
  admission, StepRuns, ledger), its commands, what a runner persists, and the closed outcome
  union.
- the transitions (`apply_workflow`; one module per concept: `admission`, `frontier`,
  `execution`, `cancellation`, `recovery`), each total, contracted (`contracts`) and checked
  against the tables of `kernel.specs.workflow`; `rules` holds the eligibility predicates the
  SQL sources are checked against; `invariants` I-W1..I-W6.
"""

from __future__ import annotations

from kernel.specs.workflow import (
    FINAL_STEP_STATUSES,
    STEP_RUN_TABLE,
    TASK_ATTEMPT_TABLE,
    WORKFLOW_EXECUTOR_TYPE,
    WORKFLOW_RUN_TABLE,
    StepRunStatus,
    WorkflowCommandName,
)
from kernel.workflow.admission import admit_task, admit_workflow
from kernel.workflow.cancellation import (
    converge_workflow_cancel,
    request_workflow_cancel,
    stops_needed,
)
from kernel.workflow.codec import (
    WORKFLOW_COMMANDS_BY_NAME,
    decode_workflow_command,
    encode_workflow_command,
    is_workflow_command,
)
from kernel.workflow.commands import (
    MAX_WORKFLOW_STEPS,
    AdmitTask,
    AdmitWorkflow,
    AdvanceFrontier,
    CompleteTask,
    ConvergeWorkflowCancel,
    FailTaskStart,
    PinnedStep,
    PrepareTask,
    RecordTaskHandle,
    RecoverTaskStartup,
    RequestWorkflowCancel,
    TimeOutTask,
    WorkflowCommand,
)
from kernel.workflow.contracts import workflow_step_violations, workflow_transition
from kernel.workflow.effects import (
    InsertStepRun,
    InsertTaskAdmission,
    InsertWorkflowAdmission,
    UpdateStepRun,
    WorkflowEffect,
    apply_workflow_effects,
)
from kernel.workflow.entities import StepRun, TaskAdmission, WorkflowAdmission, WorkflowAggregate
from kernel.workflow.execution import (
    complete_task,
    fail_task_start,
    prepare_task,
    record_task_handle,
    time_out_task,
)
from kernel.workflow.frontier import advance_frontier
from kernel.workflow.invariants import check_workflow_invariants, workflow_finality
from kernel.workflow.outcomes import WorkflowApplied, WorkflowOutcome
from kernel.workflow.plan import (
    PLAN_DIGEST_VERSION,
    PLAN_NAME_MAX_LENGTH,
    PLAN_NAME_RE,
    PLAN_STEPS_MAX,
    STEP_ARG_MAX_LENGTH,
    STEP_ARGV_MAX_ITEMS,
    STEP_KEY_MAX_LENGTH,
    STEP_KEY_RE,
    STEP_MAX_ATTEMPTS_MAX,
    STEP_MAX_ATTEMPTS_MIN,
    STEP_RETRY_BACKOFF_MAX_MS,
    PlanError,
    PlanStep,
    WorkflowPlan,
    plan_from_mapping,
)
from kernel.workflow.recovery import recover_task_startup, recovery_candidates
from kernel.workflow.routing import local_completion_command
from kernel.workflow.rules import (
    admission_due,
    dispatchable,
    frontier_changes,
    frontier_due,
    needs_convergence,
    open_for_tasks,
    retry_left,
    started_attempts,
    task_launched,
)
from kernel.workflow.selection import (
    page_advances,
    task_admission_candidates,
    task_dispatch_candidates,
    task_recovery_candidates,
    workflow_cancel_candidates,
    workflow_frontier_candidates,
)
from kernel.workflow.transitions import (
    WORKFLOW_COMMAND_TYPES,
    WORKFLOW_TRANSITIONS,
    apply_workflow,
)

__all__ = [
    "FINAL_STEP_STATUSES",
    "MAX_WORKFLOW_STEPS",
    "PLAN_DIGEST_VERSION",
    "PLAN_NAME_MAX_LENGTH",
    "PLAN_NAME_RE",
    "PLAN_STEPS_MAX",
    "STEP_ARGV_MAX_ITEMS",
    "STEP_ARG_MAX_LENGTH",
    "STEP_KEY_MAX_LENGTH",
    "STEP_KEY_RE",
    "STEP_MAX_ATTEMPTS_MAX",
    "STEP_MAX_ATTEMPTS_MIN",
    "STEP_RETRY_BACKOFF_MAX_MS",
    "STEP_RUN_TABLE",
    "TASK_ATTEMPT_TABLE",
    "WORKFLOW_COMMANDS_BY_NAME",
    "WORKFLOW_COMMAND_TYPES",
    "WORKFLOW_EXECUTOR_TYPE",
    "WORKFLOW_RUN_TABLE",
    "WORKFLOW_TRANSITIONS",
    "AdmitTask",
    "AdmitWorkflow",
    "AdvanceFrontier",
    "CompleteTask",
    "ConvergeWorkflowCancel",
    "FailTaskStart",
    "InsertStepRun",
    "InsertTaskAdmission",
    "InsertWorkflowAdmission",
    "PinnedStep",
    "PlanError",
    "PlanStep",
    "PrepareTask",
    "RecordTaskHandle",
    "RecoverTaskStartup",
    "RequestWorkflowCancel",
    "StepRun",
    "StepRunStatus",
    "TaskAdmission",
    "TimeOutTask",
    "UpdateStepRun",
    "WorkflowAdmission",
    "WorkflowAggregate",
    "WorkflowApplied",
    "WorkflowCommand",
    "WorkflowCommandName",
    "WorkflowEffect",
    "WorkflowOutcome",
    "WorkflowPlan",
    "admission_due",
    "admit_task",
    "admit_workflow",
    "advance_frontier",
    "apply_workflow",
    "apply_workflow_effects",
    "check_workflow_invariants",
    "complete_task",
    "converge_workflow_cancel",
    "decode_workflow_command",
    "dispatchable",
    "encode_workflow_command",
    "fail_task_start",
    "frontier_changes",
    "frontier_due",
    "is_workflow_command",
    "local_completion_command",
    "needs_convergence",
    "open_for_tasks",
    "page_advances",
    "plan_from_mapping",
    "prepare_task",
    "record_task_handle",
    "recover_task_startup",
    "recovery_candidates",
    "request_workflow_cancel",
    "retry_left",
    "started_attempts",
    "stops_needed",
    "task_admission_candidates",
    "task_dispatch_candidates",
    "task_launched",
    "task_recovery_candidates",
    "time_out_task",
    "workflow_cancel_candidates",
    "workflow_finality",
    "workflow_frontier_candidates",
    "workflow_step_violations",
    "workflow_transition",
]
