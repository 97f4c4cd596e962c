"""The lock probe's PostgreSQL half (`conformance.run.locks`, B-35): second connections'
`SELECT ... FOR UPDATE` on the rows a write loaded must be seen blocked by the write's backend
(`pg_blocking_pids`) and must complete once it commits. A module of its own so that psycopg is
imported only when the cluster runner is probed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Final

import psycopg

from conformance.run import cluster
from conformance.run.cluster import ClusterAdapter
from conformance.run.locks import (
    BLOCK_WAIT_S,
    RELEASE_WAIT_S,
    STATEMENTS,
    LockReport,
    LockResult,
    probe_write,
)
from conformance.run.trace import Step
from conformance.run.walk import Roots, WritePath, every_write
from kernel import RunAggregate
from runners.cluster.named_sql import STATEMENTS as CLUSTER_STATEMENTS
from runners.engine import StorageTransaction

#: PostgreSQL contenders: (statement, what it contends for, whether the aggregate has such rows).
_ROWS: Final[tuple[tuple[str, str, Callable[[RunAggregate], bool]], ...]] = (
    ("contend_run", "the Run row", lambda _aggregate: True),
    ("contend_attempts", "the Attempt rows", lambda aggregate: bool(aggregate.attempts)),
    ("contend_policy", "the policy row", lambda aggregate: aggregate.policy is not None),
    ("contend_leases", "the lease rows", lambda aggregate: bool(aggregate.leases)),
)


class _Waiter(threading.Thread):
    """One contender: on a connection of its own, `statement` in a transaction that ends as
    soon as the rows are got (so it never holds the write up longer than that)."""

    def __init__(self, dsn: str, schema: str, statement: str, run_id: str) -> None:
        super().__init__(daemon=True)
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.conn.execute(CLUSTER_STATEMENTS["set_search_path"], {"schema": schema})
        self.pid = self.conn.info.backend_pid
        self.statement = statement
        self.run_id = run_id
        self.error: str | None = None

    def run(self) -> None:
        try:
            with self.conn.transaction():
                self.conn.execute(STATEMENTS[self.statement], {"run_id": self.run_id}).fetchall()
        except Exception as exc:  # reported by `finish`, never lost in a thread
            self.error = f"{type(exc).__name__}: {exc}"


class PostgresContender:
    """`SELECT ... FOR UPDATE` from second connections on the rows the write loaded (B-35)."""

    def __init__(self, dsn: str, schema: str, monitor: psycopg.Connection[Any]) -> None:
        self.dsn = dsn
        self.schema = schema
        self.monitor = monitor
        self._waiting: list[tuple[str, _Waiter]] = []

    def hold(self, tx: StorageTransaction, aggregate: RunAggregate | None) -> list[str]:
        if aggregate is None:  # an approval write: never on the cluster runner (SPEC §5.4)
            return []
        writer: int = getattr(tx, "connection").info.backend_pid  # noqa: B009 - the store's own
        findings: list[str] = []
        for statement, rows, present in _ROWS:
            if not present(aggregate):
                continue
            waiter = _Waiter(self.dsn, self.schema, statement, aggregate.run.run_id)
            waiter.start()
            state = self._blocked(waiter, writer)
            if state == "blocked":
                self._waiting.append((rows, waiter))
                continue
            waiter.join(RELEASE_WAIT_S)
            waiter.conn.close()
            if state == "through":
                why = waiter.error or "got them"
                findings.append(
                    f"a second connection's FOR UPDATE on {rows} did not block while the write "
                    f"held its transaction after the load ({why})"
                )
            else:
                findings.append(
                    f"a second connection's FOR UPDATE on {rows} was neither blocked by the "
                    f"write nor done after {BLOCK_WAIT_S:g} s"
                )
        return findings

    def _blocked(self, waiter: _Waiter, writer: int) -> str:
        """`blocked` once the server says the writer blocks it, `through` when it finished,
        `neither` when the bounded wait ran out."""
        deadline = time.monotonic() + BLOCK_WAIT_S
        while True:
            if not waiter.is_alive():
                return "through"
            row = self.monitor.execute(
                STATEMENTS["blocked_by"], {"blocker": writer, "pid": waiter.pid}
            ).fetchone()
            if row is not None and row[0] is True:
                return "blocked"
            if time.monotonic() > deadline:
                return "neither"
            time.sleep(0.002)

    def finish(self) -> tuple[int, list[str]]:
        waiting, self._waiting = self._waiting, []
        findings: list[str] = []
        for rows, waiter in waiting:
            waiter.join(RELEASE_WAIT_S)
            if waiter.is_alive():
                findings.append(
                    f"the second connection's FOR UPDATE on {rows} was still blocked "
                    f"{RELEASE_WAIT_S:g} s after the write returned"
                )
                waiter.conn.cancel_safe()
                waiter.join(RELEASE_WAIT_S)
            elif waiter.error is not None:
                findings.append(
                    f"the second connection's FOR UPDATE on {rows} failed once the write "
                    f"returned: {waiter.error}"
                )
            waiter.conn.close()
        return len(waiting), findings


def lock_every_write_pg(root: Roots, dsn: str) -> LockReport:
    """The lock probe over the traces under `root` on the cluster runner."""

    def probe(adapter: ClusterAdapter, step: Step, path: WritePath) -> LockResult:
        contender = PostgresContender(dsn, adapter.store.schema, monitor)
        return probe_write(adapter.store, step, path, contender)

    with psycopg.connect(dsn, autocommit=True) as monitor:
        results = every_write(
            root,
            cluster.CAPABILITIES,
            lambda: ClusterAdapter(dsn),
            probe,
            lambda path, line: LockResult(path, 0, (line,)),
        )
    return LockReport(tuple(results))
