"""The cluster runner's clock port (ADR-0232 §1, SPEC §2.3, RETRY-20).

In production the observation time of every transition, source query and page is the
database's `statement_timestamp()`, read on the runner's own connection (`DatabaseClock`):
replicas whose host clocks disagree still agree on what is due and what has expired, and a
runner whose clock runs ahead never requeues a Run early. Conformance and tests inject the
time instead (`InjectedClock`): a trace's `observed_at_ms` is the time of its step.

A `TransactionClock` is read once per command transaction (after the aggregate's rows are locked,
see
`runners.engine.execute_observed`) and once per page (one observation time per page, P-5).
"""

from __future__ import annotations

from typing import Any, Protocol

import psycopg

from runners.cluster.named_sql import STATEMENTS


class TransactionClock(Protocol):
    def now_ms(self, conn: psycopg.Connection[Any]) -> int:
        """The observation time in epoch milliseconds, read on `conn` (inside its open
        transaction when there is one)."""
        ...


class DatabaseClock:
    """`statement_timestamp()` of the database, in epoch milliseconds."""

    def now_ms(self, conn: psycopg.Connection[Any]) -> int:
        row = conn.execute(STATEMENTS["database_now_ms"]).fetchone()
        assert row is not None
        return int(row[0])

    def __repr__(self) -> str:
        return "DatabaseClock()"


class InjectedClock:
    """A time set by the caller (conformance: the trace's step time); never read from a host."""

    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ms(self, conn: psycopg.Connection[Any]) -> int:
        return self.now

    def set(self, now_ms: int) -> None:
        self.now = now_ms

    def __repr__(self) -> str:
        return f"InjectedClock({self.now})"
