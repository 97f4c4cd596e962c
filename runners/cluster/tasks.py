"""The cluster task store: tasks, revisions and schedule bookkeeping on a `ClusterStore`'s schema
(issue 17 item 1; migration 0003_tasks, SQL in `sql/tasks.sql`).

The same public behaviour as the edge runner's `runners.edge.tasks.EdgeTaskStore` (the same
operations give the same results; `tests/runners/cluster/test_cluster_tasks.py` runs both), on
PostgreSQL, where several replicas write at once. It holds no rule: each write loads the stored
state in one transaction, asks `kernel.task` what it becomes, and writes that with a
compare-and-set on the row's version (that sequence is shared: `runners.task_rows.SqlTaskStore`).
What differs from the edge store is only how a transaction excludes the others (SQLite has one
writer; PostgreSQL has many):
- `add` and `remove` take a transaction-scoped advisory lock on the task name first
  (`task_write_lock`), so two first adds of one name never both insert, and read the schedule
  row `FOR UPDATE`, so a scheduler's concurrent compare-and-set waits and then finds the version
  changed (it writes nothing) instead of failing the edit;
- `write_schedule` is one guarded `UPDATE` (False: another replica's write won).
Cron iteration is croniter's (`runners.cron`); values and row mapping are `runners.task_rows`.
Times are epoch milliseconds, passed in (on cluster: the database's time, ADR-0232 §1).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Final

import psycopg

from kernel.specs import Profile
from kernel.task import ScheduleState
from runners.cluster.named_sql import load
from runners.cluster.store import STALE_ERRORS, ClusterStore
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

Conn = psycopg.Connection[Any]


class _ClusterTx(TaskRowsTx):
    """The task statements on one pooled connection: the write sequences take the name's
    advisory lock first and read the schedule row `FOR UPDATE` (the module says why)."""

    schedule_for_write: ClassVar[str] = "select_schedule_for_update"

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    def fetch_one(self, statement: str, params: Mapping[str, Any]) -> Sequence[Any] | None:
        return self._conn.execute(TASKS[statement], params).fetchone()

    def fetch_all(self, statement: str, params: Mapping[str, Any]) -> Sequence[Sequence[Any]]:
        return self._conn.execute(TASKS[statement], params).fetchall()

    def write(self, statement: str, params: Mapping[str, Any]) -> None:
        """Zero rows, or a key collision, means the database changed under the locks, which they
        exclude; fail closed (the transaction rolls back)."""
        try:
            cursor = self._conn.execute(TASKS[statement], params)
        except STALE_ERRORS as exc:
            raise StaleWrite(f"{statement}: {type(exc).__name__}") from None
        if cursor.rowcount != 1:
            raise StaleWrite(f"{statement}: {cursor.rowcount} rows")

    def lock(self, name: str) -> None:
        self._conn.execute(
            TASKS["task_write_lock"], {"namespace": TASK_LOCK_NAMESPACE, "task_name": name}
        )


class ClusterTaskStore(SqlTaskStore):
    """Tasks, revisions and schedule bookkeeping on a `ClusterStore`'s schema (its connections:
    the store's pool when it has one)."""

    PROFILE = Profile.CLUSTER

    def __init__(self, store: ClusterStore) -> None:
        self._store = store

    def __repr__(self) -> str:
        return f"ClusterTaskStore(schema={self._store.schema!r})"

    @contextmanager
    def _writing(self) -> Iterator[TaskRowsTx]:
        with self._store.connection() as conn, conn.transaction():
            yield _ClusterTx(conn)

    @contextmanager
    def _reading(self, *, snapshot: bool = False) -> Iterator[TaskRowsTx]:
        with self._store.connection() as conn:
            if not snapshot:
                yield _ClusterTx(conn)
                return
            # Several statements: one transaction, so they read one state of the schema.
            with conn.transaction():
                yield _ClusterTx(conn)

    def write_schedule(self, new: ScheduleState, expected_version: int) -> bool:
        """See `SqlTaskStore.write_schedule`: one guarded `UPDATE` (False: another replica's
        write won)."""
        params = {**schedule_params(new), "expected_version": expected_version}
        with self._store.connection() as conn:
            return conn.execute(TASKS["update_schedule"], params).rowcount == 1
