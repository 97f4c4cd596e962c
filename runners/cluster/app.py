"""The cluster application: one scheduler replica on a PostgreSQL schema (issue 17 item 1; SPEC
§6.1 `ClusterSchedulerLifecycle`, §6.2 O-5; ADR-0232).

`ClusterApplication(dsn, schema)` opens a pooled `ClusterStore` on the schema (creating the
schema if it is missing) and migrates it once, under the migrator's transaction-scoped advisory
lock (`runners.cluster.migrate`): replicas that start together wait for each other there and the
later ones find the schema current. `start()` starts the `ClusterSchedulerLifecycle` (its first
cycle runs at once); `stop()` drains the lifecycle (at most its stop timeout, L-6), then closes
the storage; concurrent and repeated calls share the first call's result.

Any number of replicas may run on one database at once: they share nothing but the database, and
every write the cycle makes is excluded by row locks, advisory locks or a compare-and-set; none
of them leads (ADR-0232 §2). Time is the database's (`runners.cluster.clock.DatabaseClock`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from psycopg import errors

from kernel.specs import Profile, ProfileBudget, budget_for
from runners.cluster.clock import TransactionClock
from runners.cluster.cycle import CycleResult, Step
from runners.cluster.dispatch import DispatchGrantsReport, discard_settled_offers, dispatch_grants
from runners.cluster.lifecycle import (
    ClusterScheduler,
    ClusterSchedulerLifecycle,
    new_attempt_id,
    unknown_evidence,
)
from runners.cluster.runtime import ClusterRuntime
from runners.cluster.store import ClusterStore
from runners.cluster.tasks import ClusterTaskStore
from runners.lifecycle import CycleReport, LifecycleIncident, Scheduler, StopResult
from runners.passes import EvidencePort

__all__ = [
    "DEFAULT_POOL_SIZE",
    "DEFAULT_SCHEMA",
    "ClusterApplication",
    "ClusterStopped",
    "open_cluster_store",
]

#: The schema a replica uses when none is named (`qlk serve --profile cluster` without --schema).
DEFAULT_SCHEMA: Final = "ql3"
#: Connections of one replica's pool: the cycle's, and one for what runs beside it.
DEFAULT_POOL_SIZE: Final = 2
#: Offers of settled leases deleted per dispatch step (a page, P-1) [decision WH-6].
SETTLED_OFFERS_PAGE: Final = 64


@dataclass(frozen=True, slots=True)
class ClusterStopped:
    """The stop's result: whether the scheduler lifecycle drained within its stop timeout."""

    scheduler: StopResult

    @property
    def drained(self) -> bool:
        return self.scheduler.drained


def open_cluster_store(dsn: str, schema: str, *, pool_size: int | None) -> ClusterStore:
    """A store on `schema` (pooled with `pool_size`; one connection of its own with None: a
    command-line client), created if missing and migrated once (module docstring).

    Two replicas creating a missing schema at the same instant may collide in the catalog
    (`CREATE SCHEMA IF NOT EXISTS` is not atomic against a concurrent one): the loser's
    statement fails with a unique violation, and the schema now exists, so it opens again."""
    try:
        return ClusterStore(dsn, schema, pool_size=pool_size, create_schema=True)
    except errors.UniqueViolation:
        return ClusterStore(dsn, schema, pool_size=pool_size, create_schema=True)


class ClusterApplication:
    """`qlk serve --profile cluster`: one scheduler replica (module docstring).

    `evidence` is the runtime-recovery evidence port (default `unknown`: §2.3 writes nothing
    for a started Attempt without trusted evidence) and `dispatch` the dispatch step (default:
    settled offers cleared, then `dispatch_grants` to the registry's online Workers);
    `scheduler` makes the lifecycle's time (tests pass a `SteppedScheduler`); `on_cycle` and
    `report` receive every cycle report and every absorbed incident; `clock` is the runtime's
    (default: the database's)."""

    def __init__(
        self,
        dsn: str,
        schema: str = DEFAULT_SCHEMA,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
        budget: ProfileBudget | None = None,
        evidence: EvidencePort = unknown_evidence,
        dispatch: Step | None = None,
        attempt_ids: Callable[[str], str] = new_attempt_id,
        scheduler: Scheduler | None = None,
        on_cycle: Callable[[CycleReport[CycleResult]], None] | None = None,
        report: Callable[[LifecycleIncident], None] | None = None,
        clock: TransactionClock | None = None,
    ) -> None:
        self.budget = budget_for(Profile.CLUSTER) if budget is None else budget
        self.schema = schema
        self.store = open_cluster_store(dsn, schema, pool_size=pool_size)
        try:
            self.runtime = ClusterRuntime(self.store, clock=clock)
            self.tasks = ClusterTaskStore(self.store)
            self.steps = ClusterScheduler(
                self.runtime,
                self.tasks,
                self.budget,
                evidence=evidence,
                dispatch=self._dispatch if dispatch is None else dispatch,
                attempt_ids=attempt_ids,
            )
            self.scheduler = ClusterSchedulerLifecycle(
                self.steps.cycle,
                self.budget,
                scheduler=scheduler,
                on_cycle=on_cycle,
                report=report,
            )
        except BaseException:
            self.store.close()
            raise
        self._stop_lock = threading.Lock()
        self._stopped: ClusterStopped | None = None

    def __repr__(self) -> str:
        # Never the DSN: it may hold a password.
        return f"ClusterApplication(schema={self.schema!r})"

    def _dispatch(self) -> DispatchGrantsReport:
        """The dispatch step (O-5 phase 5, decision of issue 17): clear one page of offers
        whose lease is settled, then one bounded page of grants to online Workers (T1)."""
        discard_settled_offers(self.store, SETTLED_OFFERS_PAGE)
        return dispatch_grants(self.store, clock=self.runtime.clock)

    def start(self) -> None:
        """Start the scheduler lifecycle (its first cycle at once; refused after `stop()`)."""
        refused = self.scheduler.start()
        if refused is not None:
            raise RuntimeError(f"{self!r}: {refused.code}")

    def stop(self) -> ClusterStopped:
        """Drain the scheduler lifecycle, then close the storage; once (shared result)."""
        with self._stop_lock:
            if self._stopped is None:
                drained = self.scheduler.stop()
                self.store.close()
                self._stopped = ClusterStopped(drained)
            return self._stopped
