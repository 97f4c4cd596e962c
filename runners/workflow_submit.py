"""`qlk workflow submit PLAN`: admit one Workflow Run of a plan (SPEC §4.1, ADR-0229; issue 18
item 5).

No rule lives here: each plan step's command becomes its implicit task exactly as an ad-hoc
`qlk submit -- CMD` does (`kernel.task.adhoc_definition`, TK-5: `adhoc:<16 hex>`, the same
command is the same task), written through the task store if new, and the step pins that task's
current revision; then one `AdmitWorkflow` runs through the engine (`execute_workflow`), and the
kernel validates and decides (`admit_workflow`: the Run `running`, its immutable admission, one
`pending` StepRun per step). The frontier, Task admission and dispatch are the scheduler's (§4.2).

`submit_workflow(store, tasks, plan, now_ms=, run_id=, project_id=, step_run_id=)` returns the
kernel's outcome, or the `TaskRefused` of a step's command. The Run id is the caller's (the CLI
draws a fresh one); StepRun ids come from `step_run_id` when given, else `derived_step_run_id`.

Order of writes: the whole `AdmitWorkflow` is built (and so shape-checked by the kernel, which
raises `CommandError`) before any task is written, so a command the kernel cannot even build
writes nothing. The tasks are then written one transaction each (as `submit_command` does) and
the admission in its own: an admission refused after that leaves only implicit tasks, which are
content-addressed and identical on any later use of the same command.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Final

from kernel.task import (
    LOCAL_EXECUTOR_TYPE,
    LOCAL_PROJECT_ID,
    TaskDefinition,
    TaskRefused,
    adhoc_definition,
)
from kernel.workflow import AdmitWorkflow, PinnedStep, WorkflowOutcome, WorkflowPlan
from runners.engine import WorkflowStorage, execute_workflow
from runners.task_rows import TaskStore

__all__ = [
    "STEP_RUN_ID_DOMAIN",
    "STEP_RUN_ID_PREFIX",
    "derived_step_run_id",
    "submit_workflow",
    "workflow_admission",
]

#: [decision] The prefix of a derived StepRun id: 3 + 32 hex = 35 characters, inside the §0.4
#: portable limit of 36, and unlike every Run id prefix (`run-`, `fr:`), so a StepRun id never
#: equals its Run's id (which `AdmitWorkflow` refuses).
STEP_RUN_ID_PREFIX: Final = "st-"
#: The domain tag hashed in front of a derived StepRun id, as §4.6 tags the `wta:` ids: another
#: derivation can never produce the same bytes.
STEP_RUN_ID_DOMAIN: Final = "ql3-workflow-step-run-v1"


def derived_step_run_id(run_id: str, step_key: str) -> str:
    """The StepRun id of step `step_key` of the Workflow Run `run_id` when the caller gives no
    factory: `"st-"` + the first 32 lowercase hex of SHA-256 over the UTF-8 bytes of
    `"ql3-workflow-step-run-v1\\0" + run_id + "\\0" + step_key`. Deterministic: a retried
    submission with the same Run id recomputes the same ids, so it is an exact replay
    (`Replayed(EXISTING)`) rather than a conflict."""
    material = "\0".join((STEP_RUN_ID_DOMAIN, run_id, step_key)).encode("utf-8")
    return STEP_RUN_ID_PREFIX + hashlib.sha256(material).hexdigest()[:32]


def workflow_admission(
    plan: WorkflowPlan,
    *,
    run_id: str,
    project_id: str,
    task_ids: Mapping[str, str],
    revisions: Mapping[str, int],
    step_run_id: Callable[[str], str],
) -> AdmitWorkflow:
    """The `AdmitWorkflow` of `plan` (§4.1): each step, in plan order, pins the task
    `task_ids[key]` at `revisions[key]`, on the local executor type, waiting for the steps of
    its `after`, with its retry policy.

    :raises CommandError: the kernel cannot build the command (for example a plan name longer
        than a portable id, §0.4); its `field` names what.
    """
    pins = tuple(
        PinnedStep(
            step_key=step.key,
            step_run_id=step_run_id(step.key),
            task_id=task_ids[step.key],
            task_revision=revisions[step.key],
            executor_type=LOCAL_EXECUTOR_TYPE,
            depends_on=step.after,
            max_attempts=step.max_attempts,
            retry_backoff_ms=step.retry_backoff_ms,
        )
        for step in plan.steps
    )
    return AdmitWorkflow(
        run_id=run_id,
        project_id=project_id,
        plan_name=plan.name,
        plan_digest=plan.digest(),
        steps=pins,
    )


def _refused_in(step_key: str, refused: TaskRefused) -> TaskRefused:
    # The kernel's code unchanged; the field says which step's command it is about (never the
    # command itself: an argument may be a secret).
    return TaskRefused(refused.code, f"{step_key}.{refused.field}" if refused.field else step_key)


def submit_workflow(
    store: WorkflowStorage,
    tasks: TaskStore,
    plan: WorkflowPlan,
    *,
    now_ms: int,
    run_id: str,
    project_id: str = LOCAL_PROJECT_ID,
    step_run_id: Callable[[str], str] | None = None,
) -> WorkflowOutcome | TaskRefused:
    """Admit one Workflow Run of `plan` at `now_ms` (see the module docstring).

    Returns the kernel's outcome: `WorkflowApplied` (admitted: the Run `running`, every StepRun
    `pending`), `Replayed(EXISTING)` for the same Run id and plan again, `Rejected` (e.g.
    `WORKFLOW_PLAN_CONFLICT`: the Run id holds another plan), `Raced`; or, before any
    admission, the `TaskRefused` of a step's command, its `field` prefixed with the step key
    (`build.argv`). On edge `tasks` must be built on `store` (one connection, FP-2).

    :raises CommandError: the kernel cannot build the admission; nothing is written then.
    """
    ids = step_run_id if step_run_id is not None else (lambda key: derived_step_run_id(run_id, key))
    definitions: dict[str, TaskDefinition] = {}
    for step in plan.steps:
        definition = adhoc_definition(step.argv)
        if isinstance(definition, TaskRefused):
            return _refused_in(step.key, definition)
        definitions[step.key] = definition
    task_ids = {key: definition.name for key, definition in definitions.items()}
    # Built once before any write, so that a command the kernel refuses to build writes no
    # task; a revision is at least 1, the only bound the command checks on it.
    workflow_admission(
        plan,
        run_id=run_id,
        project_id=project_id,
        task_ids=task_ids,
        revisions=dict.fromkeys(task_ids, 1),
        step_run_id=ids,
    )
    revisions: dict[str, int] = {}
    for key, definition in definitions.items():
        written = tasks.add(definition, now_ms)
        if isinstance(written, TaskRefused):
            return _refused_in(key, written)
        # The revision the step pins: a removed implicit task is reactivated by the re-add
        # at a new revision (TK-7), so it is read from the write, never assumed to be 1.
        revisions[key] = written.revision.revision
    command = workflow_admission(
        plan,
        run_id=run_id,
        project_id=project_id,
        task_ids=task_ids,
        revisions=revisions,
        step_run_id=ids,
    )
    return execute_workflow(store, command, now_ms)
