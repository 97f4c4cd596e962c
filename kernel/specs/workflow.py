"""The Workflow Task machines (SPEC §4, ADR-0229) as data: StepRun statuses, the Workflow
commands, and the three tables a Workflow transaction is checked against.

A Workflow is one aggregate Run (`kind = workflow`) with one StepRun per plan step; Task
Attempts are Attempts of that same Run with `step_run_id` set (§4.1). Its commands are their own
trigger enum (`WorkflowCommandName`), so the ordinary Run tables (`kernel.specs.tables`) and
everything that walks them are untouched (ADR-0229 §2: the Workflow branch MUST NOT change
ordinary behaviour). `request_workflow_cancel` records the intent (§1.9's, on the parent) that
phase 1 converges; the ordinary `request_cancel` reads a Run with one live Attempt, not a
Workflow with one per running step.

- Workflow Run table: the parent Run under every Workflow command (every applied command is a
  row, even one that keeps `running`); only `advance_frontier` and the whole-Workflow
  convergence end it (§4.4, I-W3).
- StepRun table: only the StepRuns a command changes. `version` is the epoch: every change adds
  one (§4.1), so a self-loop (`running -> running` on the handle) is a new epoch, and a retry
  (`running -> ready`, decision WF-3) is a new epoch with a new Task Attempt id.
- Task Attempt table: only the Task Attempts a command changes (no leases: local Tasks).
Read them like h11's `_state.py`; the comments name the SPEC row.
"""

from __future__ import annotations

import enum
from typing import Final

from kernel.specs.states import AttemptStatus, RunStatus
from kernel.specs.table import Table

__all__ = [
    "FINAL_STEP_STATUSES",
    "STEP_RUN_TABLE",
    "TASK_ATTEMPT_TABLE",
    "WORKFLOW_EXECUTOR_TYPE",
    "WORKFLOW_RUN_TABLE",
    "StepRunStatus",
    "WorkflowCommandName",
]

#: The `executor_type` of a Workflow aggregate Run: it is never dispatched itself (ADR-0229: the
#: Workflow id is not a Task identity), only its Task Attempts are.
WORKFLOW_EXECUTOR_TYPE: Final = "workflow"


class StepRunStatus(enum.StrEnum):
    """StepRun statuses (SPEC §4.1, decision B-59)."""

    PENDING = "pending"  # dependencies not met
    READY = "ready"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"

    @property
    def final(self) -> bool:
        return self in FINAL_STEP_STATUSES


FINAL_STEP_STATUSES: Final = frozenset(
    {
        StepRunStatus.SUCCEEDED,
        StepRunStatus.FAILED,
        StepRunStatus.CANCELLED,
        StepRunStatus.TIMED_OUT,
    }
)


class WorkflowCommandName(enum.StrEnum):
    """The triggers of the Workflow tables: the `name` of every Workflow command."""

    ADMIT_WORKFLOW = "admit_workflow"
    ADVANCE_FRONTIER = "advance_frontier"
    ADMIT_TASK = "admit_task"
    PREPARE_TASK = "prepare_task"
    RECORD_TASK_HANDLE = "record_task_handle"
    FAIL_TASK_START = "fail_task_start"
    COMPLETE_TASK = "complete_task"
    TIME_OUT_TASK = "time_out_task"
    REQUEST_WORKFLOW_CANCEL = "request_workflow_cancel"
    CONVERGE_WORKFLOW_CANCEL = "converge_workflow_cancel"
    RECOVER_TASK_STARTUP = "recover_task_startup"


_W = WorkflowCommandName
_PARENT_FINAL: Final = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED})
_PARENT_CANCELLED: Final = frozenset({RunStatus.CANCELLED, RunStatus.TIMED_OUT})
_STEP_OUTCOMES: Final = frozenset(
    {
        StepRunStatus.SUCCEEDED,
        StepRunStatus.FAILED,
        StepRunStatus.CANCELLED,
        StepRunStatus.TIMED_OUT,
    }
)
#: A failed or timed-out outcome with attempts left puts the StepRun back to `ready` at a new
#: epoch (decision WF-3): a new epoch is a new, different Task Attempt id (§4.6).
_STEP_OUTCOMES_OR_RETRY: Final = _STEP_OUTCOMES | {StepRunStatus.READY}
_STEP_CANCELLED: Final = frozenset({StepRunStatus.CANCELLED, StepRunStatus.TIMED_OUT})
_ATTEMPT_OUTCOMES: Final = frozenset(
    {
        AttemptStatus.SUCCEEDED,
        AttemptStatus.FAILED,
        AttemptStatus.CANCELLED,
        AttemptStatus.TIMED_OUT,
    }
)
_ATTEMPT_CANCELLED: Final = frozenset({AttemptStatus.CANCELLED, AttemptStatus.TIMED_OUT})

# fmt: off
WORKFLOW_RUN_TABLE: Final = Table.of("Workflow Run", RunStatus, WorkflowCommandName, {
    None: {
        _W.ADMIT_WORKFLOW:           RunStatus.RUNNING,                    # §4.1: in progress
    },
    RunStatus.RUNNING: {
        _W.ADVANCE_FRONTIER:         _PARENT_FINAL | {RunStatus.RUNNING},  # §4.4 [B-62]
        _W.ADMIT_TASK:               RunStatus.RUNNING,                    # §4.3
        _W.PREPARE_TASK:             RunStatus.RUNNING,                    # §4.4
        _W.RECORD_TASK_HANDLE:       RunStatus.RUNNING,                    # §4.4
        _W.FAIL_TASK_START:          RunStatus.RUNNING,                    # §4.4
        _W.COMPLETE_TASK:            RunStatus.RUNNING,                    # §4.4
        _W.TIME_OUT_TASK:            RunStatus.RUNNING,                    # §4.4
        _W.REQUEST_WORKFLOW_CANCEL:  RunStatus.RUNNING,                    # §1.9 intent
        _W.CONVERGE_WORKFLOW_CANCEL: _PARENT_CANCELLED,                    # §4.4 phase 1
        _W.RECOVER_TASK_STARTUP:     RunStatus.RUNNING,                    # §4.5
    },
    RunStatus.SUCCEEDED: {},
    RunStatus.FAILED: {},
    RunStatus.CANCELLED: {},
    RunStatus.TIMED_OUT: {},
})

STEP_RUN_TABLE: Final = Table.of("StepRun", StepRunStatus, WorkflowCommandName, {
    None: {
        _W.ADMIT_WORKFLOW:           StepRunStatus.PENDING,                # §4.1
    },
    StepRunStatus.PENDING: {
        # dependencies met -> ready; a dependency ended otherwise -> cancelled (decision WF-2)
        _W.ADVANCE_FRONTIER:         {StepRunStatus.READY, StepRunStatus.CANCELLED},
        _W.CONVERGE_WORKFLOW_CANCEL: _STEP_CANCELLED,                      # §4.4 phase 1
    },
    StepRunStatus.READY: {
        _W.PREPARE_TASK:             StepRunStatus.RUNNING,                # §4.4 prepare
        _W.CONVERGE_WORKFLOW_CANCEL: _STEP_CANCELLED,                      # §4.4 phase 1
    },
    StepRunStatus.RUNNING: {
        _W.RECORD_TASK_HANDLE:       StepRunStatus.RUNNING,                # §4.4, §4.7
        _W.FAIL_TASK_START:          {StepRunStatus.FAILED, StepRunStatus.READY},
        _W.COMPLETE_TASK:            _STEP_OUTCOMES_OR_RETRY,              # §4.4
        _W.TIME_OUT_TASK:            {StepRunStatus.TIMED_OUT, StepRunStatus.READY},
        _W.CONVERGE_WORKFLOW_CANCEL: _STEP_CANCELLED,                      # §4.4 phase 1
        _W.RECOVER_TASK_STARTUP:     _STEP_OUTCOMES_OR_RETRY,              # §4.5 [B-63]
    },
    StepRunStatus.SUCCEEDED: {},
    StepRunStatus.FAILED: {},
    StepRunStatus.CANCELLED: {},
    StepRunStatus.TIMED_OUT: {},
})

TASK_ATTEMPT_TABLE: Final = Table.of("Task Attempt", AttemptStatus, WorkflowCommandName, {
    None: {
        _W.ADMIT_TASK:               AttemptStatus.CLAIMED,                # §4.3
    },
    AttemptStatus.CLAIMED: {
        _W.PREPARE_TASK:             AttemptStatus.STARTING,               # §4.4 prepare
        _W.CONVERGE_WORKFLOW_CANCEL: _ATTEMPT_CANCELLED,                   # §4.4 phase 1
        # No recovery row: a `claimed` Task Attempt is never orphaned here (decision WF-4).
    },
    AttemptStatus.STARTING: {
        _W.RECORD_TASK_HANDLE:       AttemptStatus.RUNNING,                # §4.4, §4.7
        _W.FAIL_TASK_START:          AttemptStatus.FAILED,                 # §4.4
        _W.COMPLETE_TASK:            _ATTEMPT_OUTCOMES,                    # as L3 (WF-7)
        _W.CONVERGE_WORKFLOW_CANCEL: _ATTEMPT_CANCELLED,                   # after the stop (§4.8)
        _W.RECOVER_TASK_STARTUP:     _ATTEMPT_OUTCOMES | {AttemptStatus.LOST},  # §4.5
    },
    AttemptStatus.RUNNING: {
        _W.COMPLETE_TASK:            _ATTEMPT_OUTCOMES,                    # §4.4
        _W.TIME_OUT_TASK:            AttemptStatus.TIMED_OUT,              # §4.4
        _W.CONVERGE_WORKFLOW_CANCEL: _ATTEMPT_CANCELLED,                   # after the stop (§4.8)
        _W.RECOVER_TASK_STARTUP:     _ATTEMPT_OUTCOMES | {AttemptStatus.LOST},  # §4.5
    },
    AttemptStatus.LOST: {},
    AttemptStatus.SUCCEEDED: {},
    AttemptStatus.FAILED: {},
    AttemptStatus.CANCELLED: {},
    AttemptStatus.TIMED_OUT: {},
})
# fmt: on
