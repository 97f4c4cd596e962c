"""What `qlk status --dsn` and `qlk serve --profile cluster` read of a cluster schema (issue 17
item 1): the Runs per status, as the local application's `runners.local.reads.run_status_counts`
reads them from its file (SQL in `sql/status.sql`)."""

from __future__ import annotations

from typing import Final

from kernel.specs import RunStatus
from runners.cluster.named_sql import load
from runners.cluster.store import ClusterStore

__all__ = ["STATUS", "run_status_counts"]

#: The statements of this module (`sql/status.sql`).
STATUS: Final = load("status.sql")


def run_status_counts(store: ClusterStore) -> dict[RunStatus, int]:
    """Runs per status (statuses with no Run are absent), in one statement (one snapshot)."""
    with store.connection() as conn:
        rows = conn.execute(STATUS["run_status_counts"]).fetchall()
    return {RunStatus(status): int(count) for status, count in rows}
