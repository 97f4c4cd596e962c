"""Scenario builders for the cluster runtime tests: Runs driven through the kernel's commands
at a runtime's clock (database or injected), so every state is one the kernel can reach.

Database time is the real clock, so Worker sessions here expire far in its future, and
`past(store)` gives a runtime ten minutes behind the database: what it starts with the minimum
lease (5 s) has expired at database time.
"""

from __future__ import annotations

from typing import Any

import psycopg

from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    AdmitRun,
    Applied,
    Fence,
    GrantLease,
    PolicyDefinition,
    RunKind,
    RunOwner,
    Safety,
    Secret,
    WorkerSession,
    WorkerSessionStatus,
)
from runners.cluster.clock import DatabaseClock, InjectedClock
from runners.cluster.runtime import ClusterRuntime
from runners.cluster.store import ClusterStore

EXECUTOR = "shell"
FAR = 10**15  # a session expiry far beyond any database clock reading


def worker(session: str = "s1", generation: int = 1) -> WorkerSession:
    return WorkerSession(
        worker_id="w1",
        session_id=session,
        generation=generation,
        status=WorkerSessionStatus.ONLINE,
        session_expires_at_ms=FAR,
        executor_types=(EXECUTOR,),
    )


def token(attempt_id: str, generation: int) -> Secret:
    return Secret.of(f"lease_{attempt_id}_{generation}".ljust(40, "x"), "lease_token")


def policy(backoff_ms: int) -> PolicyDefinition:
    return PolicyDefinition(
        max_attempts=3,
        retry_on_lost=True,
        safety=Safety.IDEMPOTENT,
        backoff_base_ms=backoff_ms,
        backoff_max_ms=max(backoff_ms, 1),
    )


def admit(run_id: str, policy: PolicyDefinition | None = None) -> AdmitRun:
    return AdmitRun(
        run_id=run_id,
        attempt_id=f"{run_id}-a1",
        project_id="proj",
        task_id="task",
        task_revision=1,
        executor_type=EXECUTOR,
        provider_policy=policy,
        kind=RunKind.ORDINARY,
        owner=RunOwner.RUNTIME,
    )


def fence(attempt_id: str, version: int, generation: int = 1) -> Fence:
    return Fence(
        worker_id="w1",
        worker_session_id="s1",
        worker_generation=1,
        lease_generation=generation,
        lease_token=token(attempt_id, generation),
        expected_version=version,
    )


def applied(outcome: object) -> Applied:
    assert isinstance(outcome, Applied), outcome
    return outcome


def running(
    rt: ClusterRuntime, run_id: str, lease_ms: int, policy: PolicyDefinition | None = None
) -> str:
    """Admit, grant and start one Run at the runtime's clock; returns its Attempt id."""
    attempt = f"{run_id}-a1"
    applied(rt.execute(admit(run_id, policy)))
    applied(
        rt.execute(
            GrantLease(
                run_id=run_id,
                attempt_id=attempt,
                worker=worker(),
                lease_token=token(attempt, 1),
                lease_duration_ms=lease_ms,
            )
        )
    )
    applied(
        rt.execute(
            AcknowledgeStarting(
                run_id=run_id, attempt_id=attempt, fence=fence(attempt, 1), worker=worker()
            )
        )
    )
    applied(
        rt.execute(
            AcknowledgeRunning(
                run_id=run_id,
                attempt_id=attempt,
                fence=fence(attempt, 2),
                worker=worker(),
                executor_handle="pid:1",
                started_at_ms=rt.now_ms(),
            )
        )
    )
    return attempt


def db_now(conn: psycopg.Connection[Any]) -> int:
    return DatabaseClock().now_ms(conn)


def past(store: ClusterStore) -> ClusterRuntime:
    """A runtime ten minutes behind database time: what it starts with a minimum-length lease
    (5 s, LEASE_DURATION_MIN_MS) has expired at database time."""
    with store.connection() as conn:
        return ClusterRuntime(store, clock=InjectedClock(db_now(conn) - 600_000))
