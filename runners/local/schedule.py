"""The local scheduler's trigger-schedule phase and task submissions (O-3 "schedule"; issue 15
item 3; decisions TK-6..TK-13).

The phase is one implementation for both runners since issue 17: `runners.task_schedule`, over a
`runners.task_rows.TaskStore` and a `runners.engine.Storage`. This module keeps its old import
path for the local application, the CLI and the tests (the same objects, not copies).
"""

from __future__ import annotations

from runners.task_schedule import (
    CyclePlan,
    FireReport,
    SchedulePhaseReport,
    admit,
    claim,
    plan_cycle,
    record,
    refresh,
    schedule_phase,
    submit,
    submit_command,
)

__all__ = [
    "CyclePlan",
    "FireReport",
    "SchedulePhaseReport",
    "admit",
    "claim",
    "plan_cycle",
    "record",
    "refresh",
    "schedule_phase",
    "submit",
    "submit_command",
]
