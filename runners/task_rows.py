"""What both runners' task stores share (issue 15 item 3, issue 17 item 1): the values they return,
the row <-> value mapping of the task tables (the same columns on SQLite, edge `0002_tasks`, and on
PostgreSQL, cluster `0003_tasks`), and the `TaskStore` protocol the one trigger-schedule phase
(`runners.task_schedule`) and the submissions are written against, and the one sequence of every
task write and read (`SqlTaskStore` over `TaskRowsTx`).

No rule and no I/O of its own: `runners.edge.tasks.EdgeTaskStore` and
`runners.cluster.tasks.ClusterTaskStore` open the transactions and run the statements (each on its
own connection type and `sql/tasks.sql`); `kernel.task` decides. What differs between the two is
only how a transaction excludes the others (SQLite has one writer; PostgreSQL has many): the
cluster takes a per-name advisory lock (`TaskRowsTx.lock`) and reads the schedule row `FOR UPDATE`
(`TaskRowsTx.schedule_for_write`). Kept at the top of `runners` because the edge and cluster
runners never import each other (import-linter).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, ClassVar, Final, Protocol

from kernel import canonical_json, decode_provider_policy
from kernel.specs import Code, Paging, Profile, check_page_size, check_paging
from kernel.task import (
    FireRecord,
    FireState,
    ScheduleState,
    TaskDefinition,
    TaskExecution,
    TaskOrigin,
    TaskRefused,
    TaskRemoved,
    TaskRevised,
    TaskRevision,
    TaskState,
    TaskUnchanged,
    policy_document,
    remove_task,
    revise_task,
    schedule_after_removal,
    schedule_after_revision,
    task_profile_refusal,
)
from runners.cron import cron_refusal, first_fire_after

__all__ = [
    "FIRST_NAME",
    "DueSchedule",
    "SqlTaskStore",
    "TaskPage",
    "TaskRecord",
    "TaskRowsTx",
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

#: The due scan's first cursor: before every due time.
_BEFORE_ALL: Final = -(2**63)


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
    retry_policy, created_at_ms, requires_approval)`; a row that no longer validates raises
    (fail closed), it is never guessed at."""
    (name, origin, revision, argv, cwd, env, cron, deadline_ms, retry_policy, created_at_ms) = row[
        :10
    ]
    requires_approval = row[10]
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
        requires_approval=bool(requires_approval),
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
        "requires_approval": int(d.requires_approval),
    }
    return task, row


# -- one sequence for both runners' stores ---------------------------------------------------------


class TaskRowsTx(ABC):
    """One open connection of a task store, inside a write transaction or a read: the task rows
    it loads and the guarded writes it makes. A runner implements the three statement
    primitives on its own connection type and statement file (the same section names)."""

    #: The statement the write sequences read the schedule row with. The base: a plain read,
    #: because SQLite's `BEGIN IMMEDIATE` already excludes every other writer of the file.
    schedule_for_write: ClassVar[str] = "select_schedule"

    @abstractmethod
    def fetch_one(self, statement: str, params: Mapping[str, Any]) -> Sequence[Any] | None:
        """The first row of the named statement, or None."""

    @abstractmethod
    def fetch_all(self, statement: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
        """Every row of the named statement."""

    @abstractmethod
    def write(self, statement: str, params: Mapping[str, Any]) -> None:
        """One guarded write inside a transaction that read (and locked) what it writes over:
        anything but one row affected raises `runners.engine.StaleWrite` (fail closed)."""

    @abstractmethod
    def lock(self, name: str) -> None:
        """Exclude every other write of the task `name` to the end of the transaction (first,
        before any row is read: the lock order is the name, then the rows)."""

    def load_state(self, name: str) -> TaskState | None:
        row = self.fetch_one("select_task", {"task_name": name})
        return None if row is None else state_from_row(row)

    def load_schedule(self, name: str, *, for_update: bool = False) -> ScheduleState | None:
        statement = self.schedule_for_write if for_update else "select_schedule"
        row = self.fetch_one(statement, {"task_name": name})
        return None if row is None else schedule_from_row(row)

    def write_revision(self, decision: TaskRevised) -> None:
        task, row = revision_params(decision)
        if decision.expected_version is None:
            origin = decision.revision.definition.origin
            self.write("insert_task", {**task, "origin": origin.value})
        else:
            self.write(
                "update_task_revision", {**task, "expected_version": decision.expected_version}
            )
        self.write("insert_task_revision", row)

    def write_removal(self, decision: TaskRemoved) -> None:
        state = decision.state
        self.write(
            "remove_task",
            {
                "task_name": state.name,
                "at_ms": state.removed_at_ms,
                "version": state.version,
                "expected_version": decision.expected_version,
            },
        )

    def put_schedule(self, schedule: ScheduleState, previous: ScheduleState | None) -> None:
        params = schedule_params(schedule)
        if previous is None:
            self.write("insert_schedule", params)
        else:
            self.write("update_schedule", {**params, "expected_version": previous.version})


class SqlTaskStore(ABC):
    """The operations of a task store, once for both runners: each write loads the stored state
    in one transaction, asks `kernel.task` what it becomes, and writes that with a
    compare-and-set on the row's version. A runner opens the transactions and reads
    (`_writing`, `_reading`) and writes a schedule row alone (`write_schedule`)."""

    #: The profile whose tasks this store holds (`kernel.task.task_profile_refusal`).
    PROFILE: Profile = Profile.STANDALONE

    @abstractmethod
    def _writing(self) -> AbstractContextManager[TaskRowsTx]:
        """One write transaction: committed when the block ends normally, rolled back when it
        raises."""

    @abstractmethod
    def _reading(self, *, snapshot: bool = False) -> AbstractContextManager[TaskRowsTx]:
        """A read; `snapshot`: its statements see one state of the database (several reads)."""

    @abstractmethod
    def write_schedule(self, new: ScheduleState, expected_version: int) -> bool:
        """Write one schedule row where its version is still `expected_version` (the claim and
        the resolution of a fire, a refresh). False: another writer changed the row first (a
        second scheduler, an edit, a removal); nothing was written."""

    # -- writes ------------------------------------------------------------------------------
    def add(self, definition: TaskDefinition, now_ms: int) -> TaskWrite | TaskRefused:
        """`qlk task add` (and the implicit task of an ad-hoc submission): a new task, a new
        revision when the definition differs, or nothing for an identical re-add
        (`TaskWrite.written` False); a re-add of a removed task reactivates it with a new
        revision (TK-7). `TASK_CRON_INVALID` if croniter refuses the expression or it never
        fires."""
        refused_here = task_profile_refusal(definition, self.PROFILE)
        if refused_here is not None:
            return refused_here
        first_fire: int | None = None
        if definition.cron is not None:
            refused = cron_refusal(definition.cron, now_ms)
            if refused is not None:
                return refused
            first_fire = first_fire_after(definition.cron, now_ms)
        with self._writing() as tx:
            tx.lock(definition.name)
            existing = tx.load_state(definition.name)
            decision = revise_task(existing, definition, now_ms)
            if isinstance(decision, TaskUnchanged):
                assert existing is not None  # an unchanged task exists
                return TaskWrite(existing, written=False)
            tx.write_revision(decision)
            previous = tx.load_schedule(definition.name, for_update=True)
            schedule = schedule_after_revision(previous, decision, first_fire)
            if schedule is not None:
                tx.put_schedule(schedule, previous)
        return TaskWrite(
            decision.state,
            written=True,
            created=decision.created,
            reactivated=decision.reactivated,
        )

    def remove(self, name: str, now_ms: int) -> TaskWrite | TaskRefused:
        """`qlk task remove`: soft (TK-12); `TASK_NOT_FOUND` or `TASK_REMOVED` otherwise."""
        with self._writing() as tx:
            tx.lock(name)
            decision = remove_task(tx.load_state(name), now_ms)
            if isinstance(decision, TaskRefused):
                return decision
            tx.write_removal(decision)
            previous = tx.load_schedule(name, for_update=True)
            schedule = schedule_after_removal(previous)
            if schedule is not None:
                tx.put_schedule(schedule, previous)
        return TaskWrite(decision.state, written=True)

    # -- reads -------------------------------------------------------------------------------
    def state(self, name: str) -> TaskState | None:
        with self._reading() as tx:
            return tx.load_state(name)

    def get(self, name: str) -> TaskRecord | None:
        """The task's state and schedule bookkeeping, or None."""
        with self._reading(snapshot=True) as tx:
            state = tx.load_state(name)
            if state is None:
                return None
            return TaskRecord(state, tx.load_schedule(name))

    def schedule(self, name: str) -> ScheduleState | None:
        with self._reading() as tx:
            return tx.load_schedule(name)

    def revision(self, name: str, revision: int) -> TaskRevision | None:
        """The stored revision `(name, revision)` (removed tasks included), or None."""
        with self._reading() as tx:
            row = tx.fetch_one("select_task_revision", {"task_name": name, "revision": revision})
        return None if row is None else revision_from_row(row)

    def execution(self, name: str, revision: int) -> TaskExecution | None:
        """What a launcher or a Worker needs for a Run of `(task_id, task_revision)`, or None."""
        found = self.revision(name, revision)
        return None if found is None else found.execution()

    def list(
        self,
        *,
        after: str | None = None,
        limit: int = 16,
        include_removed: bool = False,
        include_adhoc: bool = False,
    ) -> TaskPage:
        """One page of tasks by name after the cursor `after` (None: the first page); `limit`
        is 1..64 (P-1). Removed and ad-hoc tasks are left out unless asked for."""
        size = check_page_size(limit, field="limit")
        params = {
            "after": FIRST_NAME if after is None else after,
            "limit": size + 1,
            "include_removed": include_removed,
            "include_adhoc": include_adhoc,
        }
        with self._reading(snapshot=True) as tx:
            rows = tx.fetch_all("list_tasks", params)
            states = [state_from_row(row) for row in rows[:size]]
            items = tuple(TaskRecord(s, tx.load_schedule(s.name)) for s in states)
        more = len(rows) > size
        return TaskPage(items, items[-1].state.name if more and items else None)

    def due(self, now_ms: int, budget: Paging) -> tuple[DueSchedule, ...]:
        """The schedule phase's due scan: rows whose `next_due_ms <= now_ms`, in
        `(next_due_ms, task)` order, `budget.pages` keyset pages of `budget.page_size` at most
        (CAD-12: never more than `budget.max_items`). Each page is one statement."""
        checked = check_paging(budget.page_size, budget.pages, field="budget", hard_pages=None)
        found: list[DueSchedule] = []
        cursor: tuple[int, str] = (_BEFORE_ALL, FIRST_NAME)
        for _ in range(checked.pages):
            params = {
                "now_ms": now_ms,
                "after_due_ms": cursor[0],
                "after_task": cursor[1],
                "limit": checked.page_size,
            }
            with self._reading() as tx:
                rows = tx.fetch_all("due_schedules", params)
            page = [DueSchedule(schedule_from_row(row), row[9]) for row in rows]
            found += page
            if len(page) < checked.page_size:
                break
            last = page[-1].state
            assert last.next_due_ms is not None  # the scan reads due rows only
            cursor = (last.next_due_ms, last.task)
        return tuple(found)
