"""What adding, removing and submitting a task does (issue 15 item 3; decisions TK-7, TK-8).

Pure decisions over the stored task state; the runner loads `TaskState`, calls one of these, and
writes what it returns in the same transaction (with `expected_version` as its compare-and-set).

- `revise_task` (`qlk task add`): a new name is revision 1; a definition equal to the current
  revision's is an identical re-add, `TaskUnchanged`, nothing is written; any other definition is
  the next revision (`TaskRevised`). Revisions are immutable and never renumbered, so Runs keep
  the revision they were admitted with. [decision TK-7] Re-adding a *removed* task reactivates it
  with a new revision even when the definition is identical, so "it was removed, then re-added" is
  visible in the revision history, and a re-activated schedule starts afresh (TK-9).
- `remove_task` (`qlk task remove`): soft. The task stops firing and refuses submissions
  (`TASK_REMOVED`); its revisions, schedule bookkeeping and Runs stay. Removing an unknown task is
  `TASK_NOT_FOUND`, removing a removed one `TASK_REMOVED` (nothing is written either way).
- `submission` (`qlk submit TASK`): the `AdmitRun` of a manual Run of the current revision, with
  the caller's ids (actor `user`), or a refusal. [decision TK-8] Manual submissions are not
  scheduled fires: they never move the schedule bookkeeping, and a task with a schedule can still
  be submitted by hand.
- `fire_command`: the `AdmitRun` of a scheduled fire (actor `trigger`, deterministic ids).

Every Run of a local task is admitted with project `local`, executor type `local.posix` and the
revision's retry policy as the provider's policy (A-2: the policy comes from the frozen task
revision, never from the command).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.approved_action.commands import RequestApproval, approval_id
from kernel.commands import AdmitRun
from kernel.specs.codes import Code
from kernel.specs.states import Actor
from kernel.task.definition import (
    LOCAL_EXECUTOR_TYPE,
    LOCAL_PROJECT_ID,
    TaskDefinition,
    TaskRefused,
    TaskRevision,
)

__all__ = [
    "TaskRemoved",
    "TaskRevised",
    "TaskState",
    "TaskUnchanged",
    "admit_command",
    "remove_task",
    "request_submission",
    "revise_task",
    "submission",
]


@dataclass(frozen=True, slots=True)
class TaskState:
    """A task as stored: its current revision, when it was removed (None: active), and the row's
    version (the compare-and-set of every write; 1 on insert)."""

    current: TaskRevision
    removed_at_ms: int | None
    version: int

    @property
    def name(self) -> str:
        return self.current.name

    @property
    def removed(self) -> bool:
        return self.removed_at_ms is not None


@dataclass(frozen=True, slots=True)
class TaskUnchanged:
    """An identical re-add of an active task: nothing is written (`current` is returned)."""

    current: TaskRevision


@dataclass(frozen=True, slots=True)
class TaskRevised:
    """A new task (`expected_version is None`: insert) or a new revision of one (update the task
    row where its version is `expected_version`). `reactivated`: the task was removed."""

    revision: TaskRevision
    state: TaskState
    expected_version: int | None
    reactivated: bool

    @property
    def created(self) -> bool:
        return self.expected_version is None


@dataclass(frozen=True, slots=True)
class TaskRemoved:
    """Soft removal: write `state` where the task row's version is `expected_version`."""

    state: TaskState
    expected_version: int


def revise_task(
    existing: TaskState | None, definition: TaskDefinition, now_ms: int
) -> TaskUnchanged | TaskRevised:
    """The outcome of `qlk task add` over the stored state (TK-7)."""
    if existing is None:
        revision = TaskRevision(definition, 1, now_ms)
        return TaskRevised(revision, TaskState(revision, None, 1), None, reactivated=False)
    if not existing.removed and existing.current.definition == definition:
        return TaskUnchanged(existing.current)
    revision = TaskRevision(definition, existing.current.revision + 1, now_ms)
    return TaskRevised(
        revision,
        TaskState(revision, None, existing.version + 1),
        existing.version,
        reactivated=existing.removed,
    )


def remove_task(existing: TaskState | None, now_ms: int) -> TaskRemoved | TaskRefused:
    """The outcome of `qlk task remove` over the stored state."""
    if existing is None:
        return TaskRefused(Code.TASK_NOT_FOUND, "name")
    if existing.removed:
        return TaskRefused(Code.TASK_REMOVED, "name")
    return TaskRemoved(TaskState(existing.current, now_ms, existing.version + 1), existing.version)


def admit_command(revision: TaskRevision, run_id: str, attempt_id: str, actor: Actor) -> AdmitRun:
    """The admission of one Run of `revision` (A-1..A-5; TK-4): project `local`, executor type
    `local.posix`, the revision's policy as the provider's policy."""
    return AdmitRun(
        run_id=run_id,
        attempt_id=attempt_id,
        project_id=LOCAL_PROJECT_ID,
        task_id=revision.name,
        task_revision=revision.revision,
        executor_type=LOCAL_EXECUTOR_TYPE,
        provider_policy=revision.retry_policy,
        actor=actor,
    )


def request_submission(
    existing: TaskState | None,
    run_id: str,
    attempt_id: str,
    *,
    requested_by: str,
) -> AdmitRun | RequestApproval | TaskRefused:
    """A manual submission of the current revision (TK-8; issue 19): the `AdmitRun` of
    `submission`, or, when the revision requires approval, the `RequestApproval` (action
    `approval_id(run_id)`, asked by `requested_by`) that will make exactly that admission once a
    person approves it."""
    admit = submission(existing, run_id, attempt_id)
    if isinstance(admit, TaskRefused) or existing is None:
        return admit
    if not existing.current.definition.requires_approval:
        return admit
    return RequestApproval(approval_id(run_id), admit, requested_by)


def submission(existing: TaskState | None, run_id: str, attempt_id: str) -> AdmitRun | TaskRefused:
    """A manual Run of the current revision (TK-8): `TASK_NOT_FOUND`, `TASK_REMOVED`, or the
    `AdmitRun` (actor `user`) to run through the engine. The ids are the caller's (fresh)."""
    if existing is None:
        return TaskRefused(Code.TASK_NOT_FOUND, "name")
    if existing.removed:
        return TaskRefused(Code.TASK_REMOVED, "name")
    return admit_command(existing.current, run_id, attempt_id, Actor.USER)
