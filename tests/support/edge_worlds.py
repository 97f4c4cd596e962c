"""Writing a world of Run aggregates into a real SQLite file with the edge runner's own
statements (the source tests compare each SQL page with the kernel's selection oracle on it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kernel import Event, RunAggregate
from runners.edge.store import EdgeStore, EdgeTransaction
from tests.support.source_worlds import world_effects


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
        for effect in world_effects(aggregates, events):
            tx.execute(effect)
