"""What both runners' task stores share (issue 15 item 3, issue 17 item 1): the values they return,
the row <-> value mapping of the task tables (the same columns on SQLite, edge `0002_tasks`, and on
PostgreSQL, cluster `0003_tasks`), and the `TaskStore` protocol the one trigger-schedule phase
(`runners.task_schedule`) and the submissions are written against.

Pure mapping, no rule and no I/O: `runners.edge.tasks.EdgeTaskStore` and
`runners.cluster.tasks.ClusterTaskStore` hold the transactions; `kernel.task` decides. Kept at the
top of `runners` because the edge and cluster runners never import each other (import-linter).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

from kernel import canonical_json, decode_provider_policy
from kernel.specs import Code, Paging
from kernel.task import (
    FireRecord,
    FireState,
    ScheduleState,
    TaskDefinition,
    TaskExecution,
    TaskOrigin,
    TaskRefused,
    TaskRevised,
    TaskRevision,
    TaskState,
    policy_document,
)

__all__ = [
    "FIRST_NAME",
    "DueSchedule",
    "TaskPage",
    "TaskRecord",
    "TaskStore",
    "TaskWrite",
    "revision_from_row",
    "revision_params",
    "schedule_from_row",
    "schedule_params",
    "state_from_row",
]

#: The first page's cursor: every name sorts after the empty string.
FIRST_NAME: Final = ""


@dataclass(frozen=True, slots=True)
class TaskWrite:
    """What `add` or `remove` did: the task's state afterwards, whether anything was written,
    whether the task is new (revision 1 of a new name) or was reactivated by a re-add."""

    state: TaskState
    written: bool
    created: bool = False
    reactivated: bool = False

    @property
    def revision(self) -> TaskRevision:
        return self.state.current


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """A stored task: its state (current revision, removal, version) and its schedule
    bookkeeping (None: it never had a cron)."""

    state: TaskState
    schedule: ScheduleState | None


@dataclass(frozen=True, slots=True)
class TaskPage:
    """One page of `list`, by name. `next_after` is the cursor of the next page (None: last)."""

    items: tuple[TaskRecord, ...]
    next_after: str | None


@dataclass(frozen=True, slots=True)
class DueSchedule:
    """One row of the due scan: the bookkeeping and the task's current revision number."""

    state: ScheduleState
    current_revision: int


class TaskStore(Protocol):
    """What the trigger-schedule phase and the submissions need of a task store (both
    runners' stores have it; every write is a compare-and-set, so several schedulers on one
    database never write over each other)."""

    def add(self, definition: TaskDefinition, now_ms: int) -> TaskWrite | TaskRefused: ...

    def state(self, name: str) -> TaskState | None: ...

    def revision(self, name: str, revision: int) -> TaskRevision | None: ...

    def execution(self, name: str, revision: int) -> TaskExecution | None: ...

    def due(self, now_ms: int, budget: Paging) -> tuple[DueSchedule, ...]: ...

    def write_schedule(self, new: ScheduleState, expected_version: int) -> bool: ...


# -- rows <-> values -------------------------------------------------------------------------------


def _json(value: object, field: str) -> str:
    return canonical_json(value, field=field).decode("utf-8")


def revision_from_row(row: Sequence[Any]) -> TaskRevision:
    """A stored revision from `(task_name, origin, revision, argv, cwd, env, cron, deadline_ms,
    retry_policy, created_at_ms)`; a row that no longer validates raises (fail closed), it is
    never guessed at."""
    (name, origin, revision, argv, cwd, env, cron, deadline_ms, retry_policy, created_at_ms) = row
    policy = None if retry_policy is None else decode_provider_policy(json.loads(retry_policy))
    definition = TaskDefinition(
        name=name,
        argv=tuple(json.loads(argv)),
        cwd=cwd,
        env=tuple(sorted(json.loads(env).items())),
        cron=cron,
        deadline_ms=deadline_ms,
        retry_policy=policy,
        origin=TaskOrigin(origin),
    )
    return TaskRevision(definition, revision, created_at_ms)


def state_from_row(row: Sequence[Any]) -> TaskState:
    """A task from `select_task`/`list_tasks`: the task row's columns, then its current
    revision's."""
    name, origin, current, removed_at_ms, version = row[:5]
    return TaskState(revision_from_row((name, origin, current, *row[5:])), removed_at_ms, version)


def schedule_from_row(row: Sequence[Any]) -> ScheduleState:
    """The bookkeeping from `(task_name, cron, since_ms, next_due_ms, fire_at_ms, fire_revision,
    fire_state, fire_code, version, ...)`."""
    (name, cron, since_ms, next_due_ms, fire_at_ms, fire_revision, fire_state, fire_code) = row[:8]
    version = row[8]
    fire = (
        None
        if fire_at_ms is None
        else FireRecord(
            fire_at_ms,
            fire_revision,
            FireState(fire_state),
            None if fire_code is None else Code(fire_code),
        )
    )
    return ScheduleState(name, cron, since_ms, next_due_ms, fire, version)


def schedule_params(state: ScheduleState) -> dict[str, Any]:
    """The named parameters of `insert_schedule` / `update_schedule`."""
    fire = state.last_fire
    return {
        "task_name": state.task,
        "cron": state.cron,
        "since_ms": state.since_ms,
        "next_due_ms": state.next_due_ms,
        "fire_at_ms": None if fire is None else fire.fire_at_ms,
        "fire_revision": None if fire is None else fire.revision,
        "fire_state": None if fire is None else fire.state.value,
        "fire_code": None if fire is None or fire.code is None else fire.code.value,
        "version": state.version,
    }


def revision_params(decision: TaskRevised) -> tuple[dict[str, Any], dict[str, Any]]:
    """The named parameters of the task row write (`insert_task` needs `origin` as well,
    `update_task_revision` needs `expected_version`) and of `insert_task_revision`."""
    revision = decision.revision
    d = revision.definition
    task = {
        "task_name": d.name,
        "current_revision": revision.revision,
        "at_ms": revision.created_at_ms,
        "version": decision.state.version,
    }
    policy = policy_document(d.retry_policy)
    row = {
        "task_name": d.name,
        "revision": revision.revision,
        "argv": _json(list(d.argv), "argv"),
        "cwd": d.cwd,
        "env": _json(dict(d.env), "env"),
        "cron": d.cron,
        "deadline_ms": d.deadline_ms,
        "retry_policy": None if policy is None else _json(policy, "retry_policy"),
        "digest": d.digest,
        "created_at_ms": revision.created_at_ms,
    }
    return task, row
