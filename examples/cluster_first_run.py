"""Drive one Run to completion on PostgreSQL through the cluster runner, at database time.

    export QL3_PG_DSN=postgresql://postgres@127.0.0.1:5432/test
    python examples/cluster_first_run.py [SCHEMA]

The store creates (if missing) and migrates the schema (default `ql3_example`); every command
runs in one transaction that takes the Attempt's advisory lock, locks the Run's rows, reads
the database's `statement_timestamp()` and persists the kernel's effects with guarded
statements. Without QL3_PG_DSN the script uses the server at the default address or starts a
throwaway one.
"""

from __future__ import annotations

import secrets
import sys

from conformance.run.local_server import ensure_dsn
from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    AdmitRun,
    Command,
    CompleteWithLease,
    CompletionOutcome,
    Fence,
    GrantLease,
    Secret,
    WorkerSession,
    WorkerSessionStatus,
)
from runners.cluster.runtime import ClusterRuntime
from runners.cluster.store import ClusterStore


def main(schema: str = "ql3_example") -> None:
    with ensure_dsn(None, announce=lambda m: print(m, file=sys.stderr)) as dsn:
        store = ClusterStore(dsn, schema, create_schema=True)
        try:
            run(ClusterRuntime(store), secrets.token_hex(4))
            print(f"done: {len(store.project()['runs'])} Runs in schema {schema}")
        finally:
            store.close()


def run(rt: ClusterRuntime, suffix: str) -> None:
    run_id, attempt_id = f"run-{suffix}", f"attempt-{suffix}"
    worker = WorkerSession(
        "worker-1",
        "session-1",
        1,
        WorkerSessionStatus.ONLINE,
        session_expires_at_ms=rt.now_ms() + 3_600_000,
        executor_types=("shell",),
    )
    token = Secret.of(secrets.token_urlsafe(32), "lease_token")

    def fence(version: int) -> Fence:
        return Fence("worker-1", "session-1", 1, 1, token, version)

    def step(command: Command) -> None:
        outcome = rt.execute(command)
        print(f"{command.name:<22} -> {outcome.kind.value} ({outcome.code.value})")

    step(AdmitRun(run_id, attempt_id, "project", "task", 1, "shell"))
    step(GrantLease(run_id, attempt_id, worker, token, 30_000))
    step(AcknowledgeStarting(run_id, attempt_id, fence(1), worker))
    # The Worker reports its process start time; here: now, at database time.
    step(AcknowledgeRunning(run_id, attempt_id, fence(2), worker, "pid:4242", rt.now_ms()))
    done = CompleteWithLease(
        run_id, attempt_id, fence(3), worker, 1, CompletionOutcome.SUCCEEDED, exit_code=0
    )
    step(done)
    step(done)  # a replayed completion (lost response) converges: Replayed, nothing written


if __name__ == "__main__":
    main(*sys.argv[1:2])
