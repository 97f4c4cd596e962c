"""Tasks and schedules of the local runtime (issue 15 item 3): the facade runners import.

Pure, like the rest of the kernel: no clock, no croniter, no I/O. Time is an input (`now_ms`), and
so are the cron times the runner's croniter iteration found.

- `definition`: `TaskDefinition` (validated, immutable), `define_task` / `adhoc_definition`
  (a value or a `TaskRefused(code, field)`), `TaskRevision`, `TaskExecution` (what the launcher
  reads for a Run's `(task, revision)`), `LOCAL_PROJECT_ID`, `LOCAL_EXECUTOR_TYPE`, and
  `TASK_EXECUTOR_TYPE` (the same type, for cluster task Runs too).
- `catalog`: `qlk task add` (`revise_task`), `qlk task remove` (`remove_task`), `qlk submit`
  (`submission`), over `TaskState`.
- `fire_ids`: the deterministic Run and Attempt ids of a fire (`fire_run_id`, `fire_attempt_id`).
- `schedule`: the schedule bookkeeping (`ScheduleState`) and the phase's decisions
  (`decide_fires`, `claim_fire`, `fire_command`, `resolve_fire`, `schedule_after_revision`,
  `schedule_after_removal`).

    >>> from kernel.task import define_task, fire_run_id
    >>> task = define_task("backup", ["/usr/bin/backup", "--all"], cron="*/5 * * * *")
    >>> task.cron, len(fire_run_id("backup", 1, 300_000))
    ('*/5 * * * *', 35)
"""

from __future__ import annotations

from kernel.task.catalog import (
    TaskRemoved,
    TaskRevised,
    TaskState,
    TaskUnchanged,
    admit_command,
    remove_task,
    request_submission,
    revise_task,
    submission,
)
from kernel.task.definition import (
    ADHOC_NAME_PREFIX,
    ARG_MAX_LENGTH,
    ARGV_MAX_ITEMS,
    CRON_FIELDS,
    CRON_MAX_LENGTH,
    CWD_MAX_LENGTH,
    DEADLINE_MAX_MS,
    DEADLINE_MIN_MS,
    ENV_MAX_ITEMS,
    ENV_NAME_MAX_LENGTH,
    ENV_VALUE_MAX_LENGTH,
    LOCAL_EXECUTOR_TYPE,
    LOCAL_PROJECT_ID,
    TASK_EXECUTOR_TYPE,
    TASK_NAME_MAX_LENGTH,
    TASK_NAME_RE,
    TaskDefinition,
    TaskDefinitionError,
    TaskExecution,
    TaskOrigin,
    TaskRefused,
    TaskRevision,
    adhoc_definition,
    cron_shape_refusal,
    define_task,
    normalize_cron,
    policy_document,
    task_profile_refusal,
)
from kernel.task.fire_ids import (
    FIRE_ATTEMPT_PREFIX,
    FIRE_RUN_PREFIX,
    fire_attempt_id,
    fire_run_id,
)
from kernel.task.schedule import (
    FireKind,
    FirePlan,
    FireRecord,
    FireResolution,
    FireState,
    Refresh,
    ScheduleCandidate,
    SchedulePlan,
    ScheduleState,
    claim_fire,
    decide_fires,
    fire_command,
    refreshed_schedule,
    resolve_fire,
    resolved_schedule,
    schedule_after_removal,
    schedule_after_revision,
)

__all__ = [
    "ADHOC_NAME_PREFIX",
    "ARGV_MAX_ITEMS",
    "ARG_MAX_LENGTH",
    "CRON_FIELDS",
    "CRON_MAX_LENGTH",
    "CWD_MAX_LENGTH",
    "DEADLINE_MAX_MS",
    "DEADLINE_MIN_MS",
    "ENV_MAX_ITEMS",
    "ENV_NAME_MAX_LENGTH",
    "ENV_VALUE_MAX_LENGTH",
    "FIRE_ATTEMPT_PREFIX",
    "FIRE_RUN_PREFIX",
    "LOCAL_EXECUTOR_TYPE",
    "LOCAL_PROJECT_ID",
    "TASK_EXECUTOR_TYPE",
    "TASK_NAME_MAX_LENGTH",
    "TASK_NAME_RE",
    "FireKind",
    "FirePlan",
    "FireRecord",
    "FireResolution",
    "FireState",
    "Refresh",
    "ScheduleCandidate",
    "SchedulePlan",
    "ScheduleState",
    "TaskDefinition",
    "TaskDefinitionError",
    "TaskExecution",
    "TaskOrigin",
    "TaskRefused",
    "TaskRemoved",
    "TaskRevised",
    "TaskRevision",
    "TaskState",
    "TaskUnchanged",
    "adhoc_definition",
    "admit_command",
    "claim_fire",
    "cron_shape_refusal",
    "decide_fires",
    "define_task",
    "fire_attempt_id",
    "fire_command",
    "fire_run_id",
    "normalize_cron",
    "policy_document",
    "refreshed_schedule",
    "remove_task",
    "request_submission",
    "resolve_fire",
    "resolved_schedule",
    "revise_task",
    "schedule_after_removal",
    "schedule_after_revision",
    "submission",
    "task_profile_refusal",
]
