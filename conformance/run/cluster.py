"""The cluster runner behind the conformance adapter port (SPEC §7, `conformance.run.adapter`).

`ClusterAdapter` drives a `ClusterStore` on a real PostgreSQL server, one fresh schema per
adapter (the replayer makes one per trace), with the suite's shared step semantics (`run_step`
for commands and faults), projects through the backdoor reader, and `reopen()` really closes
and reopens the connection. Capabilities: the run domain, faults, the sources, both recovery
and page semantics, `guards` and `workflow` (the Workflow rows of SPEC §4.1 through
`execute_workflow`, and the Workflow sources); a trace that needs anything else is reported as
not applicable, never as passed.
"""

from __future__ import annotations

import uuid

import psycopg
from psycopg import sql

from conformance.run.adapter import WORKFLOW, StoreAdapter
from runners.cluster.named_sql import STATEMENTS
from runners.cluster.store import ClusterStore

CAPABILITIES = frozenset(
    {
        "run",
        "faults",
        "sources",
        "cluster_recovery",
        "lost_retry_cluster",
        "local_recovery",
        "lost_retry_local",
        "guards",
        WORKFLOW,
    }
)


class ClusterAdapter(StoreAdapter):
    """`ConformanceAdapter` over a `ClusterStore` in a schema of its own, dropped on close."""

    name = "cluster"
    capabilities = CAPABILITIES

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._schema = f"ql3_{uuid.uuid4().hex[:16]}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL(STATEMENTS["create_schema"]).format(schema=sql.Identifier(self._schema))
            )
        try:
            self.store: ClusterStore = ClusterStore(dsn, self._schema)
        except BaseException:
            self._drop()
            raise

    def reopen(self) -> None:
        self.store.reopen()

    def close(self) -> None:
        try:
            self.store.close()
        finally:
            self._drop()

    def _drop(self) -> None:
        with psycopg.connect(self._dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL(STATEMENTS["drop_schema"]).format(schema=sql.Identifier(self._schema))
            )


def make_cluster_adapter(dsn: str) -> ClusterAdapter:
    """A fresh adapter in a new schema of the database at `dsn`; `close()` drops the schema."""
    return ClusterAdapter(dsn)
