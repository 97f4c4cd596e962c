"""The task store of the local application: tasks, revisions and schedule bookkeeping on the
edge store's SQLite file (issue 15 item 3; migration 0002_tasks, SQL in `sql/tasks.sql`).

It works on the *same* `SqliteAuthority` as the `EdgeStore` it is built from (FP-2: one SQLite
connection per process), and holds no rule: each write loads the stored state in one
`BEGIN IMMEDIATE` transaction, asks `kernel.task` what it becomes, and writes that with a
compare-and-set on the row's version. Cron iteration is croniter's (`runners.cron`); the
values and the row mapping are shared with the cluster runner's store (`runners.task_rows`).

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

import sqlite3
from collections.abc import Mapping
from typing import Any, Final

from kernel.specs import Paging, check_page_size, check_paging
from kernel.task import (
    ScheduleState,
    TaskDefinition,
    TaskExecution,
    TaskRefused,
    TaskRemoved,
    TaskRevised,
    TaskRevision,
    TaskState,
    TaskUnchanged,
    remove_task,
    revise_task,
    schedule_after_removal,
    schedule_after_revision,
)
from runners.cron import cron_refusal, first_fire_after
from runners.edge.named_sql import load
from runners.edge.store import EdgeStore
from runners.engine import StaleWrite
from runners.task_rows import (
    FIRST_NAME,
    DueSchedule,
    TaskPage,
    TaskRecord,
    TaskWrite,
    revision_from_row,
    revision_params,
    schedule_from_row,
    schedule_params,
    state_from_row,
)

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
_FIRST: Final = FIRST_NAME


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
        params = {**schedule_params(new), "expected_version": expected_version}
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
        return None if row is None else revision_from_row(tuple(row))

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
            states = [state_from_row(row) for row in rows[:size]]
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
            page = [DueSchedule(schedule_from_row(row), row[9]) for row in rows]
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
        return None if row is None else state_from_row(row)

    @staticmethod
    def _load_schedule(conn: sqlite3.Connection, name: str) -> ScheduleState | None:
        row = conn.execute(TASKS["select_schedule"], {"task_name": name}).fetchone()
        return None if row is None else schedule_from_row(row)

    @staticmethod
    def _write_revision(conn: sqlite3.Connection, decision: TaskRevised) -> None:
        task, row = revision_params(decision)
        if decision.expected_version is None:
            origin = decision.revision.definition.origin
            _write(conn, "insert_task", {**task, "origin": origin.value})
        else:
            _write(
                conn,
                "update_task_revision",
                {**task, "expected_version": decision.expected_version},
            )
        _write(conn, "insert_task_revision", row)

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
        params = schedule_params(schedule)
        if previous is None:
            _write(conn, "insert_schedule", params)
        else:
            _write(conn, "update_schedule", {**params, "expected_version": previous.version})
