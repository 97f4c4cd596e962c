"""The task store of the local application: tasks, revisions and schedule bookkeeping on the
edge store's SQLite file (issue 15 item 3; migration 0002_tasks, SQL in `sql/tasks.sql`).

It works on the *same* `SqliteAuthority` as the `EdgeStore` it is built from (FP-2: one SQLite
connection per process), and holds no rule: each write loads the stored state in one
`BEGIN IMMEDIATE` transaction, asks `kernel.task` what it becomes, and writes that with a
compare-and-set on the row's version. Cron iteration is croniter's (`runners.edge.cron`).

API (all times are epoch milliseconds, passed in):
- `add(definition, now_ms) -> TaskWrite | TaskRefused`: a new task, a new revision when the
  definition differs, or nothing for an identical re-add (`TaskWrite.written` False); a re-add of
  a removed task reactivates it with a new revision (TK-7). `TASK_CRON_INVALID` if croniter
  refuses the expression or it never fires.
- `remove(name, now_ms) -> TaskWrite | TaskRefused`: soft removal (TK-12).
- `state(name)`, `get(name) -> TaskRecord | None` (state and schedule), `revision(name, n)`,
  `execution(name, n) -> TaskExecution | None` (what the launcher reads for a Run's task).
- `list(after=..., limit=..., include_removed=..., include_adhoc=...) -> TaskPage`: one keyset
  page by name (P-1..P-3).
- Schedule bookkeeping for the schedule phase (`runners.local.schedule`): `schedule(name)`,
  `due(now_ms, budget)` (the due scan, at most `budget.max_items` rows), `write_schedule(new,
  expected_version) -> bool` (False: a concurrent writer won; nothing written).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kernel import canonical_json, decode_provider_policy
from kernel.specs import Code, Paging, check_page_size, check_paging
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
)
from runners.edge.cron import cron_refusal, first_fire_after
from runners.edge.named_sql import load
from runners.edge.store import EdgeStore
from runners.engine import StaleWrite

__all__ = [
    "TASKS",
    "DueSchedule",
    "EdgeTaskStore",
    "TaskPage",
    "TaskRecord",
    "TaskWrite",
]

#: The task store's statements (`sql/tasks.sql`).
TASKS: Final = load("tasks.sql")

#: The first page's cursor: every name sorts after the empty string.
_FIRST: Final = ""


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


# -- rows <-> values -------------------------------------------------------------------------------


def _json(value: object, field: str) -> str:
    return canonical_json(value, field=field).decode("utf-8")


def _revision(row: tuple[Any, ...]) -> TaskRevision:
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


def _state(row: tuple[Any, ...]) -> TaskState:
    """A task from `select_task`/`list_tasks`: the task row's columns, then its current
    revision's."""
    name, origin, current, removed_at_ms, version = row[:5]
    return TaskState(_revision((name, origin, current, *row[5:])), removed_at_ms, version)


def _schedule(row: tuple[Any, ...]) -> ScheduleState:
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


def _schedule_params(state: ScheduleState) -> dict[str, Any]:
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


def _write(conn: sqlite3.Connection, name: str, params: Mapping[str, Any]) -> None:
    """One guarded write inside a transaction that read what it writes over: zero rows means
    the file changed under the transaction's own lock, which cannot happen; fail closed."""
    cursor = conn.execute(TASKS[name], params)
    if cursor.rowcount != 1:
        raise StaleWrite(f"{name}: {cursor.rowcount} rows")


class EdgeTaskStore:
    """Tasks, revisions and schedule bookkeeping on an `EdgeStore`'s file and connection."""

    def __init__(self, store: EdgeStore) -> None:
        self._authority = store.authority

    # -- writes ------------------------------------------------------------------------------
    def add(self, definition: TaskDefinition, now_ms: int) -> TaskWrite | TaskRefused:
        """`qlk task add` (and the implicit task of an ad-hoc submission): see the module."""
        first_fire: int | None = None
        if definition.cron is not None:
            refused = cron_refusal(definition.cron, now_ms)
            if refused is not None:
                return refused
            first_fire = first_fire_after(definition.cron, now_ms)
        with self._authority.transaction() as conn:
            existing = self._load_state(conn, definition.name)
            decision = revise_task(existing, definition, now_ms)
            if isinstance(decision, TaskUnchanged):
                assert existing is not None  # an unchanged task exists
                return TaskWrite(existing, written=False)
            self._write_revision(conn, decision)
            previous = self._load_schedule(conn, definition.name)
            schedule = schedule_after_revision(previous, decision, first_fire)
            if schedule is not None:
                self._put_schedule(conn, schedule, previous)
        return TaskWrite(
            decision.state,
            written=True,
            created=decision.created,
            reactivated=decision.reactivated,
        )

    def remove(self, name: str, now_ms: int) -> TaskWrite | TaskRefused:
        """`qlk task remove`: soft (TK-12); `TASK_NOT_FOUND` or `TASK_REMOVED` otherwise."""
        with self._authority.transaction() as conn:
            decision = remove_task(self._load_state(conn, name), now_ms)
            if isinstance(decision, TaskRefused):
                return decision
            self._write_removal(conn, decision)
            previous = self._load_schedule(conn, name)
            schedule = schedule_after_removal(previous)
            if schedule is not None:
                self._put_schedule(conn, schedule, previous)
        return TaskWrite(decision.state, written=True)

    def write_schedule(self, new: ScheduleState, expected_version: int) -> bool:
        """Write one schedule row where its version is still `expected_version` (the claim and
        the resolution of a fire, a refresh). False: another writer changed the row first (a
        second scheduler, an edit, a removal); nothing was written."""
        params = {**_schedule_params(new), "expected_version": expected_version}
        with self._authority.transaction() as conn:
            return conn.execute(TASKS["update_schedule"], params).rowcount == 1

    # -- reads -------------------------------------------------------------------------------
    def state(self, name: str) -> TaskState | None:
        with self._authority.reading() as conn:
            return self._load_state(conn, name)

    def get(self, name: str) -> TaskRecord | None:
        with self._authority.reading() as conn:
            state = self._load_state(conn, name)
            if state is None:
                return None
            return TaskRecord(state, self._load_schedule(conn, name))

    def schedule(self, name: str) -> ScheduleState | None:
        with self._authority.reading() as conn:
            return self._load_schedule(conn, name)

    def revision(self, name: str, revision: int) -> TaskRevision | None:
        """The stored revision `(name, revision)` (removed tasks included), or None."""
        with self._authority.reading() as conn:
            row = conn.execute(
                TASKS["select_task_revision"], {"task_name": name, "revision": revision}
            ).fetchone()
        return None if row is None else _revision(tuple(row))

    def execution(self, name: str, revision: int) -> TaskExecution | None:
        """What the launcher needs for a Run of `(task_id, task_revision)`, or None."""
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
            "after": _FIRST if after is None else after,
            "limit": size + 1,
            "include_removed": include_removed,
            "include_adhoc": include_adhoc,
        }
        with self._authority.reading() as conn:
            rows = conn.execute(TASKS["list_tasks"], params).fetchall()
            states = [_state(row) for row in rows[:size]]
            items = tuple(TaskRecord(s, self._load_schedule(conn, s.name)) for s in states)
        more = len(rows) > size
        return TaskPage(items, items[-1].state.name if more and items else None)

    def due(self, now_ms: int, budget: Paging) -> tuple[DueSchedule, ...]:
        """The schedule phase's due scan: rows whose `next_due_ms <= now_ms`, in
        `(next_due_ms, task)` order, `budget.pages` keyset pages of `budget.page_size` at most
        (CAD-12: never more than `budget.max_items`). Each page is one statement."""
        checked = check_paging(budget.page_size, budget.pages, field="budget", hard_pages=None)
        found: list[DueSchedule] = []
        cursor: tuple[int, str] = (-(2**63), _FIRST)
        for _ in range(checked.pages):
            params = {
                "now_ms": now_ms,
                "after_due_ms": cursor[0],
                "after_task": cursor[1],
                "limit": checked.page_size,
            }
            with self._authority.reading() as conn:
                rows = conn.execute(TASKS["due_schedules"], params).fetchall()
            page = [DueSchedule(_schedule(row), row[9]) for row in rows]
            found += page
            if len(page) < checked.page_size:
                break
            last = page[-1].state
            assert last.next_due_ms is not None  # the scan reads due rows only
            cursor = (last.next_due_ms, last.task)
        return tuple(found)

    # -- inside a transaction ----------------------------------------------------------------
    @staticmethod
    def _load_state(conn: sqlite3.Connection, name: str) -> TaskState | None:
        row = conn.execute(TASKS["select_task"], {"task_name": name}).fetchone()
        return None if row is None else _state(row)

    @staticmethod
    def _load_schedule(conn: sqlite3.Connection, name: str) -> ScheduleState | None:
        row = conn.execute(TASKS["select_schedule"], {"task_name": name}).fetchone()
        return None if row is None else _schedule(row)

    @staticmethod
    def _write_revision(conn: sqlite3.Connection, decision: TaskRevised) -> None:
        revision = decision.revision
        d = revision.definition
        at = revision.created_at_ms
        task = {
            "task_name": d.name,
            "current_revision": revision.revision,
            "at_ms": at,
            "version": decision.state.version,
        }
        if decision.expected_version is None:
            _write(conn, "insert_task", {**task, "origin": d.origin.value})
        else:
            _write(
                conn,
                "update_task_revision",
                {**task, "expected_version": decision.expected_version},
            )
        policy = policy_document(d.retry_policy)
        _write(
            conn,
            "insert_task_revision",
            {
                "task_name": d.name,
                "revision": revision.revision,
                "argv": _json(list(d.argv), "argv"),
                "cwd": d.cwd,
                "env": _json(dict(d.env), "env"),
                "cron": d.cron,
                "deadline_ms": d.deadline_ms,
                "retry_policy": None if policy is None else _json(policy, "retry_policy"),
                "digest": d.digest,
                "created_at_ms": at,
            },
        )

    @staticmethod
    def _write_removal(conn: sqlite3.Connection, decision: TaskRemoved) -> None:
        state = decision.state
        _write(
            conn,
            "remove_task",
            {
                "task_name": state.name,
                "at_ms": state.removed_at_ms,
                "version": state.version,
                "expected_version": decision.expected_version,
            },
        )

    @staticmethod
    def _put_schedule(
        conn: sqlite3.Connection, schedule: ScheduleState, previous: ScheduleState | None
    ) -> None:
        params = _schedule_params(schedule)
        if previous is None:
            _write(conn, "insert_schedule", params)
        else:
            _write(conn, "update_schedule", {**params, "expected_version": previous.version})
