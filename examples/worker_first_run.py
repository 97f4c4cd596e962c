"""A Worker end to end in a temporary directory (SPEC §3): the edge runner is the control
plane, the file journal is the Worker's inbox, and a real child process runs the Attempt.

    python examples/worker_first_run.py

Prints each step's journal state and ends with the Attempt `succeeded` on the control plane,
exactly one line in the executor's spawn journal, and no receipt left behind.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from kernel import AdmitRun, GrantLease, Secret, WorkerSession, WorkerSessionStatus
from kernel.specs.journal import DeliveryKind
from runners.edge.store import EdgeStore
from runners.engine import execute
from runners.worker.control_plane import EngineControlPlane, offer_for
from runners.worker.journal.file import FileJournal
from runners.worker.posix.adapters import PosixExecutorPort, SpawnJournal
from runners.worker.posix.executor import PosixExecutor
from runners.worker.posix.receipts import CompletionReceiptStore
from runners.worker.runtime import WorkerRuntime


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        control = EdgeStore(root / "control.sqlite3")
        worker = WorkerSession(
            "worker-1", "session-1", 1, WorkerSessionStatus.ONLINE, now_ms() + 3_600_000, ("shell",)
        )
        sessions = {"worker-1": worker}
        client = EngineControlPlane(control, lambda _tx, worker_id: sessions.get(worker_id), now_ms)

        # The control plane admits a Run and grants its lease to worker-1.
        token = Secret.of("a-lease-token-from-a-csprng-0123456789abcdef", "lease_token")
        execute(control, AdmitRun("run-1", "attempt-1", "project", "task", 1, "shell"), now_ms())
        execute(control, GrantLease("run-1", "attempt-1", worker, token, 30_000), now_ms())
        spec = {
            "run_id": "run-1",
            "attempt_id": "attempt-1",
            "project_id": "project",
            "task_id": "task",
            "task_revision": 1,
            "argv": [sys.executable, "-c", "print('hello from the child')"],
        }
        with control.transaction() as tx:
            aggregate = tx.load_run_of_attempt("attempt-1")
        assert aggregate is not None
        offer = offer_for(aggregate, "attempt-1", token, spec)

        # The Worker: journal, executor with its receipts and spawn journal, one runtime.
        receipts = CompletionReceiptStore(root / "receipts")
        receipts.ensure_directory()
        spawns = SpawnJournal(root / "spawns")
        runtime = WorkerRuntime(
            FileJournal(root / "journal"),
            client,
            PosixExecutorPort(PosixExecutor(receipts), spawns),
            receipts,
            session=lambda: worker,
            clock=now_ms,
        )
        print("startup:", runtime.start().state)  # acquire, audit, (recovery), hold
        print("delivery:", runtime.deliver(offer).state)  # ... -> running_acknowledged
        while receipts.read("attempt-1") is None:  # the wrapper publishes when the child ends
            time.sleep(0.02)
        with control.transaction() as tx:
            aggregate = tx.load_run_of_attempt("attempt-1")
        assert aggregate is not None
        # The control plane redelivers with the current lease version (T4 moved it).
        runtime.deliver(offer_for(aggregate, "attempt-1", token, spec, DeliveryKind.LEASE_RECOVERY))
        poll = runtime.poll_completions()
        print("completion:", [r.outcome.value for r in poll.results])  # ['completed']
        with control.transaction() as tx:
            aggregate = tx.load_run_of_attempt("attempt-1")
        assert aggregate is not None
        print("run:", aggregate.run.status)  # succeeded
        print("spawns:", len(spawns.entries()), "receipt left:", receipts.read("attempt-1"))
        runtime.stop()
        control.close()
        ok = aggregate.run.status.value == "succeeded" and len(spawns.entries()) == 1
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
