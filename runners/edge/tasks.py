"""The task store of the local application: tasks, revisions and schedule bookkeeping on the
edge store's SQLite file (issue 15 item 3; migration 0002_tasks, SQL in `sql/tasks.sql`).

It works on the *same* `SqliteAuthority` as the `EdgeStore` it is built from (FP-2: one SQLite
connection per process), and holds no rule: each write loads the stored state in one
`BEGIN IMMEDIATE` transaction, asks `kernel.task` what it becomes, and writes that with a
compare-and-set on the row's version. That sequence, the values and the row mapping are shared
with the cluster runner's store (`runners.task_rows.SqlTaskStore`); this module opens the
transactions and runs the statements on SQLite. Cron iteration is croniter's (`runners.cron`).

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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final

from kernel.task import ScheduleState
from runners.edge.named_sql import load
from runners.edge.store import EdgeStore
from runners.engine import StaleWrite
from runners.task_rows import (
    DueSchedule,
    SqlTaskStore,
    TaskPage,
    TaskRecord,
    TaskRowsTx,
    TaskWrite,
    schedule_params,
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


class _EdgeTx(TaskRowsTx):
    """The task statements on the authority's connection, inside its lock. No name lock and a
    plain schedule read (the base's): `BEGIN IMMEDIATE` already excludes every other writer."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def fetch_one(self, statement: str, params: Mapping[str, Any]) -> Sequence[Any] | None:
        row: Sequence[Any] | None = self._conn.execute(TASKS[statement], params).fetchone()
        return row

    def fetch_all(self, statement: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
        return self._conn.execute(TASKS[statement], params).fetchall()

    def lock(self, name: str) -> None:
        """Nothing to take: `BEGIN IMMEDIATE` already excludes every other writer of the file."""

    def write(self, statement: str, params: Mapping[str, Any]) -> None:
        """Zero rows means the file changed under the transaction's own lock, which cannot
        happen; fail closed."""
        cursor = self._conn.execute(TASKS[statement], params)
        if cursor.rowcount != 1:
            raise StaleWrite(f"{statement}: {cursor.rowcount} rows")


class EdgeTaskStore(SqlTaskStore):
    """Tasks, revisions and schedule bookkeeping on an `EdgeStore`'s file and connection."""

    def __init__(self, store: EdgeStore) -> None:
        self._authority = store.authority

    @contextmanager
    def _writing(self) -> Iterator[TaskRowsTx]:
        with self._authority.transaction() as conn:
            yield _EdgeTx(conn)

    @contextmanager
    def _reading(self, *, snapshot: bool = False) -> Iterator[TaskRowsTx]:
        # One connection under the authority's lock: no other statement of this process runs
        # in between, so several reads already see one state (`snapshot` asks nothing more).
        with self._authority.reading() as conn:
            yield _EdgeTx(conn)

    def write_schedule(self, new: ScheduleState, expected_version: int) -> bool:
        """See `SqlTaskStore.write_schedule`: one guarded `UPDATE` in its own transaction."""
        params = {**schedule_params(new), "expected_version": expected_version}
        with self._authority.transaction() as conn:
            return conn.execute(TASKS["update_schedule"], params).rowcount == 1
