"""Every Workflow transition by command type, and `apply_workflow` (as `kernel.transitions.apply`
for Runs): the one entry point a runner calls with a loaded `WorkflowAggregate`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from kernel.workflow.admission import admit_task, admit_workflow
from kernel.workflow.cancellation import converge_workflow_cancel, request_workflow_cancel
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
from kernel.workflow.entities import WorkflowAggregate
from kernel.workflow.execution import (
    complete_task,
    fail_task_start,
    prepare_task,
    record_task_handle,
    time_out_task,
)
from kernel.workflow.frontier import advance_frontier
from kernel.workflow.outcomes import WorkflowOutcome
from kernel.workflow.recovery import recover_task_startup

__all__ = ["WORKFLOW_COMMAND_TYPES", "WORKFLOW_TRANSITIONS", "apply_workflow"]

WORKFLOW_TRANSITIONS: Final[dict[type, Callable[..., WorkflowOutcome]]] = {
    AdmitWorkflow: admit_workflow,
    AdvanceFrontier: advance_frontier,
    AdmitTask: admit_task,
    PrepareTask: prepare_task,
    RecordTaskHandle: record_task_handle,
    FailTaskStart: fail_task_start,
    CompleteTask: complete_task,
    TimeOutTask: time_out_task,
    RequestWorkflowCancel: request_workflow_cancel,
    ConvergeWorkflowCancel: converge_workflow_cancel,
    RecoverTaskStartup: recover_task_startup,
}
WORKFLOW_COMMAND_TYPES: Final = tuple(WORKFLOW_TRANSITIONS)


def apply_workflow(
    aggregate: WorkflowAggregate | None, command: WorkflowCommand, observed_at_ms: int
) -> WorkflowOutcome:
    """Run the one Workflow transition for `command`'s type."""
    transition: Any = WORKFLOW_TRANSITIONS[type(command)]
    result: WorkflowOutcome = transition(aggregate, command, observed_at_ms)
    return result
