"""The cluster task store: tasks, revisions and schedule bookkeeping on a `ClusterStore`'s schema
(issue 17 item 1; migration 0003_tasks, SQL in `sql/tasks.sql`).

The same public behaviour as the edge runner's `runners.edge.tasks.EdgeTaskStore` (the same
operations give the same results; `tests/runners/cluster/test_cluster_tasks.py` runs both), on
PostgreSQL, where several replicas write at once. It holds no rule: each write loads the stored
state in one transaction, asks `kernel.task` what it becomes, and writes that with a
compare-and-set on the row's version. What differs from the edge store is only how a transaction
excludes the others (SQLite has one writer; PostgreSQL has many):
- `add` and `remove` take a transaction-scoped advisory lock on the task name first
  (`task_write_lock`), so two first adds of one name never both insert, and read the schedule
  row `FOR UPDATE`, so a scheduler's concurrent compare-and-set waits and then finds the version
  changed (it writes nothing) instead of failing the edit;
- `write_schedule` is one guarded `UPDATE` (False: another replica's write won).
Cron iteration is croniter's (`runners.cron`); values and row mapping are `runners.task_rows`.
Times are epoch milliseconds, passed in (on cluster: the database's time, ADR-0232 §1).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import psycopg

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
from runners.cluster.named_sql import load
from runners.cluster.store import STALE_ERRORS, ClusterStore
from runners.cron import cron_refusal, first_fire_after
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
    "TASK_LOCK_NAMESPACE",
    "ClusterTaskStore",
    "DueSchedule",
    "TaskPage",
    "TaskRecord",
    "TaskWrite",
]

#: The task store's statements (`sql/tasks.sql`).
TASKS: Final = load("tasks.sql")

#: The first key of the task-name advisory locks ("ql3t"): the two-key space, apart from the
#: Attempt locks and the migrator's lock (one bigint key each).
TASK_LOCK_NAMESPACE: Final = 0x716C_3374

#: The due scan's first cursor: before every due time.
_BEFORE_ALL: Final = -(2**63)

Conn = psycopg.Connection[Any]


def _write(conn: Conn, name: str, params: Mapping[str, Any]) -> None:
    """One guarded write inside a transaction that locked what it writes over: zero rows, or a
    key collision, means the database changed under the locks, which they exclude; fail closed
    (the transaction rolls back)."""
    try:
        cursor = conn.execute(TASKS[name], params)
    except STALE_ERRORS as exc:
        raise StaleWrite(f"{name}: {type(exc).__name__}") from None
    if cursor.rowcount != 1:
        raise StaleWrite(f"{name}: {cursor.rowcount} rows")


class ClusterTaskStore:
    """Tasks, revisions and schedule bookkeeping on a `ClusterStore`'s schema (its connections:
    the store's pool when it has one)."""

    def __init__(self, store: ClusterStore) -> None:
        self._store = store

    def __repr__(self) -> str:
        return f"ClusterTaskStore(schema={self._store.schema!r})"

    # -- writes ------------------------------------------------------------------------------
    def add(self, definition: TaskDefinition, now_ms: int) -> TaskWrite | TaskRefused:
        """`qlk task add` (and the implicit task of an ad-hoc submission): a new task, a new
        revision when the definition differs, nothing for an identical re-add; a re-add of a
        removed task reactivates it (TK-7). `TASK_CRON_INVALID` if croniter refuses it."""
        first_fire: int | None = None
        if definition.cron is not None:
            refused = cron_refusal(definition.cron, now_ms)
            if refused is not None:
                return refused
            first_fire = first_fire_after(definition.cron, now_ms)
        with self._store.connection() as conn, conn.transaction():
            self._lock(conn, definition.name)
            existing = self._load_state(conn, definition.name)
            decision = revise_task(existing, definition, now_ms)
            if isinstance(decision, TaskUnchanged):
                assert existing is not None  # an unchanged task exists
                return TaskWrite(existing, written=False)
            self._write_revision(conn, decision)
            previous = self._load_schedule(conn, definition.name, for_update=True)
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
        with self._store.connection() as conn, conn.transaction():
            self._lock(conn, name)
            decision = remove_task(self._load_state(conn, name), now_ms)
            if isinstance(decision, TaskRefused):
                return decision
            self._write_removal(conn, decision)
            previous = self._load_schedule(conn, name, for_update=True)
            schedule = schedule_after_removal(previous)
            if schedule is not None:
                self._put_schedule(conn, schedule, previous)
        return TaskWrite(decision.state, written=True)

    def write_schedule(self, new: ScheduleState, expected_version: int) -> bool:
        """Write one schedule row where its version is still `expected_version` (the claim and
        the resolution of a fire, a refresh). False: another writer changed the row first (a
        second replica, an edit, a removal); nothing was written."""
        params = {**schedule_params(new), "expected_version": expected_version}
        with self._store.connection() as conn:
            return conn.execute(TASKS["update_schedule"], params).rowcount == 1

    # -- reads -------------------------------------------------------------------------------
    def state(self, name: str) -> TaskState | None:
        with self._store.connection() as conn:
            return self._load_state(conn, name)

    def get(self, name: str) -> TaskRecord | None:
        with self._store.connection() as conn, conn.transaction():
            state = self._load_state(conn, name)
            if state is None:
                return None
            return TaskRecord(state, self._load_schedule(conn, name))

    def schedule(self, name: str) -> ScheduleState | None:
        with self._store.connection() as conn:
            return self._load_schedule(conn, name)

    def revision(self, name: str, revision: int) -> TaskRevision | None:
        """The stored revision `(name, revision)` (removed tasks included), or None."""
        with self._store.connection() as conn:
            row = conn.execute(
                TASKS["select_task_revision"], {"task_name": name, "revision": revision}
            ).fetchone()
        return None if row is None else revision_from_row(row)

    def execution(self, name: str, revision: int) -> TaskExecution | None:
        """What a Worker needs for a Run of `(task_id, task_revision)`, or None."""
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
        with self._store.connection() as conn, conn.transaction():
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
        cursor: tuple[int, str] = (_BEFORE_ALL, FIRST_NAME)
        for _ in range(checked.pages):
            params = {
                "now_ms": now_ms,
                "after_due_ms": cursor[0],
                "after_task": cursor[1],
                "limit": checked.page_size,
            }
            with self._store.connection() as conn:
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
    def _lock(conn: Conn, name: str) -> None:
        conn.execute(
            TASKS["task_write_lock"], {"namespace": TASK_LOCK_NAMESPACE, "task_name": name}
        )

    @staticmethod
    def _load_state(conn: Conn, name: str) -> TaskState | None:
        row = conn.execute(TASKS["select_task"], {"task_name": name}).fetchone()
        return None if row is None else state_from_row(row)

    @staticmethod
    def _load_schedule(conn: Conn, name: str, *, for_update: bool = False) -> ScheduleState | None:
        statement = TASKS["select_schedule_for_update" if for_update else "select_schedule"]
        row = conn.execute(statement, {"task_name": name}).fetchone()
        return None if row is None else schedule_from_row(row)

    @staticmethod
    def _write_revision(conn: Conn, decision: TaskRevised) -> None:
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
    def _write_removal(conn: Conn, decision: TaskRemoved) -> None:
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
    def _put_schedule(conn: Conn, schedule: ScheduleState, previous: ScheduleState | None) -> None:
        params = schedule_params(schedule)
        if previous is None:
            _write(conn, "insert_schedule", params)
        else:
            _write(conn, "update_schedule", {**params, "expected_version": previous.version})
