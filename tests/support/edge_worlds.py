"""Writing a world of Run aggregates into a real SQLite file with the edge runner's own
statements (the source tests compare each SQL page with the kernel's selection oracle on it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kernel import (
    AppendEvent,
    Event,
    InsertAttempt,
    InsertLease,
    InsertPolicy,
    InsertRun,
    RunAggregate,
)
from runners.edge.store import EdgeStore, EdgeTransaction


def persist_world(
    store: EdgeStore,
    aggregates: Sequence[RunAggregate],
    events: Mapping[str, Sequence[Event]] | None = None,
) -> None:
    """Replace the file's Run-domain rows with `aggregates` (and their `events`, by Run id)."""
    with store.authority.transaction() as conn:
        conn.execute("DELETE FROM events")
        conn.execute("DELETE FROM run_dispatch_leases")
        conn.execute("DELETE FROM run_retry_policies")
        conn.execute("DELETE FROM attempts")
        conn.execute("DELETE FROM runs")
        tx = EdgeTransaction(conn)
        for agg in aggregates:
            tx.execute(InsertRun(agg.run))
            for attempt in agg.attempts:
                tx.execute(InsertAttempt(attempt))
            if agg.policy is not None:
                tx.execute(InsertPolicy(agg.policy))
            for lease in agg.leases:
                tx.execute(InsertLease(lease))
            for event in (events or {}).get(agg.run.run_id, ()):
                tx.execute(AppendEvent(event))
