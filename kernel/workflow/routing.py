"""Which kernel command a local port answer becomes, for an Attempt that may be a Task Attempt
(SPEC §4.4, ADR-0229 §2): the runner reads the Attempt's `step_run_id` (a fact of its row) and
asks here, so the choice between the ordinary path and the Workflow path is the kernel's, never
a runner's branch on a status or a code.
"""

from __future__ import annotations

from kernel.commands import CompleteLocal, LocalReceipt
from kernel.workflow.commands import CompleteTask

__all__ = ["local_completion_command"]


def local_completion_command(
    run_id: str, attempt_id: str, step_run_id: str | None, receipt: LocalReceipt
) -> CompleteLocal | CompleteTask:
    """A receipt of a Task Attempt completes through `complete_task` (its StepRun, never the
    parent, I-W3); any other local Attempt's through L3."""
    if step_run_id is not None:
        return CompleteTask(run_id, attempt_id, receipt)
    return CompleteLocal(run_id, attempt_id, receipt)
