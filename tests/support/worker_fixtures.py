"""A real control plane (the edge runner on a SQLite file) and the Worker runtime around a real
journal adapter, for the receiver and recovery tests (SPEC §3.5, §3.11-§3.15).

`ControlPlane` admits Runs and grants leases through the kernel on an `EdgeStore`, and builds
the offers a dispatcher would send (`runners.worker.control_plane.offer_for`). `Worker`
assembles one Worker runtime: receiver, lease lifecycle, reconciler, coordinator, supervisor
and lease-loss coordinator, on the given journal and executor. `ScriptedExecutor` is an
executor port whose `start` answers as scripted and counts every call (the in-process tests'
spawn counter; the POSIX tests count through the executor's spawn journal instead).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernel.commands import AdmitRun, GrantLease
from kernel.entities import RunAggregate, WorkerSession
from kernel.identity import Secret
from kernel.outcomes import Applied
from kernel.specs.journal import DeliveryKind
from kernel.specs.states import StopResult, WorkerSessionStatus
from kernel.worker.control_plane_view import AuthorityFacts
from kernel.worker.coordinator import CompletionSubmission
from kernel.worker.reconciler import HandleInspection, ReceiptCheck, ReceiptFacts
from kernel.worker.record import JournalRecord, Offer, OfferLease
from runners.edge.store import EdgeStore
from runners.engine import execute
from runners.worker.control_plane import EngineControlPlane, offer_for
from runners.worker.coordinator import Coordinator
from runners.worker.journal.file import FileJournal
from runners.worker.journal.lock import JournalOwnership
from runners.worker.journal.port import JournalStore
from runners.worker.journal.sqlite import SqliteJournal
from runners.worker.lease_lifecycle import LeaseLossReason, WorkerLeaseLifecycle
from runners.worker.lease_loss import LeaseLossCoordinator
from runners.worker.ports import (
    ControlPlaneUnavailable,
    ExecutionContext,
    ExecutorRefused,
    LeaseAck,
)
from runners.worker.posix.adapters import TokenContextFactory
from runners.worker.receiver import Receiver
from runners.worker.reconciler import ReceiptEvidencePort, Reconciler
from runners.worker.supervisor import StartupSupervisor

T0 = 1_700_000_000_000
DURATION_MS = 30_000
WORKER_ID = "w1"
SESSION_ID = "w1-s1"


class NoTimer:
    """A journal ownership refresh timer that never fires (these tests are not about the
    timer, and a test ends long before any stale window)."""

    def __init__(self, interval_s: float, tick: Callable[[], bool]) -> None:
        del interval_s, tick

    def start(self) -> None:
        pass

    def cancel(self) -> None:
        pass

    def join(self, timeout_s: float) -> None:
        pass


def file_journal(root: Path) -> FileJournal:
    return FileJournal(root, JournalOwnership(root, timer_factory=NoTimer))


def sqlite_journal(root: Path) -> SqliteJournal:
    return SqliteJournal(root, JournalOwnership(root, timer_factory=NoTimer))


#: Both journal adapters, by name (tests run on each).
JOURNALS: dict[str, Callable[[Path], FileJournal | SqliteJournal]] = {
    "file": file_journal,
    "sqlite": sqlite_journal,
}


class ManualClock:
    """Milliseconds that move only when told (both sides share it in these tests)."""

    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


def session(
    status: WorkerSessionStatus = WorkerSessionStatus.ONLINE,
    *,
    session_id: str = SESSION_ID,
    generation: int = 1,
    expires_at_ms: int = T0 + 3_600_000,
) -> WorkerSession:
    return WorkerSession(
        worker_id=WORKER_ID,
        session_id=session_id,
        generation=generation,
        status=status,
        session_expires_at_ms=expires_at_ms,
        executor_types=("shell",),
    )


def lease_token_for(attempt_id: str) -> Secret:
    return Secret.of(f"lease-token-of-{attempt_id}-0123456789abcdef", "lease_token")


class ControlPlane:
    """The edge runner as the control plane (issue 6 item 5)."""

    def __init__(self, path: Path, clock: ManualClock) -> None:
        self.store = EdgeStore(path)
        self.clock = clock
        self.sessions: dict[str, WorkerSession] = {WORKER_ID: session()}
        self.specs: dict[str, dict[str, object]] = {}
        self.engine = EngineControlPlane(
            self.store, lambda _tx, worker_id: self.sessions.get(worker_id), clock
        )
        self.client = SwitchableClient(self.engine)

    def close(self) -> None:
        self.store.close()

    def admit_and_grant(
        self, run_id: str, argv: list[str] | None = None, *, duration_ms: int = DURATION_MS
    ) -> Offer:
        attempt_id = f"{run_id}-a1"
        admitted = execute(
            self.store, AdmitRun(run_id, attempt_id, "proj", "task", 1, "shell"), self.clock()
        )
        assert isinstance(admitted, Applied), admitted
        self.clock.advance(1)
        grant = GrantLease(
            run_id, attempt_id, self.sessions[WORKER_ID], lease_token_for(attempt_id), duration_ms
        )
        granted = execute(self.store, grant, self.clock())
        assert isinstance(granted, Applied), granted
        self.specs[attempt_id] = {
            "run_id": run_id,
            "attempt_id": attempt_id,
            "project_id": "proj",
            "task_id": "task",
            "task_revision": 1,
            "argv": argv if argv is not None else ["true"],
        }
        self.clock.advance(1)
        return self.offer(attempt_id)

    def aggregate(self, attempt_id: str) -> RunAggregate:
        with self.store.transaction() as tx:
            found = tx.load_run_of_attempt(attempt_id)
        assert found is not None
        return found

    def offer(self, attempt_id: str, kind: DeliveryKind = DeliveryKind.NEW_CLAIM) -> Offer:
        """The offer for the Attempt's current lease (a redelivery carries its version)."""
        return offer_for(
            self.aggregate(attempt_id),
            attempt_id,
            lease_token_for(attempt_id),
            self.specs[attempt_id],
            kind,
        )

    def attempt_status(self, attempt_id: str) -> str:
        attempt = self.aggregate(attempt_id).attempt(attempt_id)
        assert attempt is not None
        return attempt.status.value


class SwitchableClient:
    """The real client, with per-method overrides a test installs (`overrides[name] = fn`;
    the E-3 read: `reads["read_authority"] = fn`), for "the response was lost" and "the
    control plane is unreachable" windows."""

    def __init__(self, inner: EngineControlPlane) -> None:
        self.inner = inner
        self.overrides: dict[str, Callable[..., LeaseAck]] = {}
        self.reads: dict[str, Callable[..., AuthorityFacts | None]] = {}
        self.calls: list[str] = []

    def _call(self, name: str, *args: Any) -> LeaseAck:
        self.calls.append(name)
        override = self.overrides.get(name)
        if override is not None:
            return override(*args)
        method: Callable[..., LeaseAck] = getattr(self.inner, name)
        return method(*args)

    def acknowledge_starting(self, lease: OfferLease) -> LeaseAck:
        return self._call("acknowledge_starting", lease)

    def renew(self, lease: OfferLease, duration_ms: int) -> LeaseAck:
        return self._call("renew", lease, duration_ms)

    def acknowledge_running(
        self, lease: OfferLease, executor_handle: str, started_at_ms: int
    ) -> LeaseAck:
        return self._call("acknowledge_running", lease, executor_handle, started_at_ms)

    def fail_start(self, lease: OfferLease, failure_code: str) -> LeaseAck:
        return self._call("fail_start", lease, failure_code)

    def complete(self, submission: CompletionSubmission) -> LeaseAck:
        return self._call("complete", submission)

    def read_authority(
        self, run_id: str, attempt_id: str, lease_generation: int
    ) -> AuthorityFacts | None:
        self.calls.append("read_authority")
        override = self.reads.get("read_authority")
        if override is not None:
            return override(run_id, attempt_id, lease_generation)
        return self.inner.read_authority(run_id, attempt_id, lease_generation)


def unavailable(*args: object) -> LeaseAck:
    """An override: the control plane cannot be reached."""
    raise ControlPlaneUnavailable


@dataclass
class ScriptedExecutor:
    """`Executor` that answers `handle` (default), `refuse` or `ambiguous`, and counts."""

    answer: str = "handle"
    calls: list[str] = field(default_factory=list)
    contexts: list[ExecutionContext] = field(default_factory=list)
    hook: Callable[[ExecutionContext], None] | None = None

    def start(self, context: ExecutionContext) -> str:
        self.calls.append(context.offer_id)
        self.contexts.append(context)
        if self.hook is not None:
            self.hook(context)
        if self.answer == "refuse":
            raise ExecutorRefused("EXECUTABLE_NOT_FOUND")
        if self.answer == "ambiguous":
            raise RuntimeError("handshake lost")
        return f"test:{context.attempt_id}:{len(self.calls)}"


@dataclass
class ScriptedInspector:
    answer: HandleInspection = HandleInspection.RUNNING
    calls: list[str] = field(default_factory=list)

    def inspect(self, executor_handle: str) -> HandleInspection:
        self.calls.append(executor_handle)
        return self.answer


@dataclass
class ScriptedController:
    answer: StopResult | str = StopResult.TERMINATION_REQUESTED
    calls: list[str] = field(default_factory=list)

    def stop(self, executor_handle: str) -> StopResult | str:
        self.calls.append(executor_handle)
        return self.answer


@dataclass
class MemoryReceipts:
    """A `ReceiptEvidencePort` holding receipts facts by Attempt (for in-process tests: the facts a
    real receipt store + authenticator would answer; the POSIX tests use the real ones)."""

    receipts: dict[str, ReceiptFacts] = field(default_factory=dict)
    deleted: list[str] = field(default_factory=list)
    fail_delete: bool = False

    def check(self, record: JournalRecord) -> tuple[ReceiptCheck, ReceiptFacts | None]:
        facts = self.receipts.get(record.offer.lease.attempt_id)
        if facts is None:
            return ReceiptCheck.ABSENT, None
        return ReceiptCheck.VALID, facts

    def delete(self, attempt_id: str) -> bool:
        if self.fail_delete:
            return False
        self.deleted.append(attempt_id)
        self.receipts.pop(attempt_id, None)
        return True


class Worker:
    """One Worker runtime on `journal` (acquired by the caller)."""

    def __init__(
        self,
        journal: JournalStore,
        control: ControlPlane,
        executor: object,
        *,
        receipts: ReceiptEvidencePort | None = None,
        inspector: object | None = None,
        controller: object | None = None,
    ) -> None:
        self.journal = journal
        self.control = control
        self.clock = control.clock
        self.receipts: ReceiptEvidencePort = receipts if receipts is not None else MemoryReceipts()
        self.inspector = inspector if inspector is not None else ScriptedInspector()
        self.controller = controller if controller is not None else ScriptedController()
        self.lost: list[tuple[str, LeaseLossReason]] = []
        self.lease_loss = LeaseLossCoordinator(journal, self.controller, self.clock)  # type: ignore[arg-type]
        self.lifecycle = WorkerLeaseLifecycle(
            control.client, duration_ms=DURATION_MS, on_lost=self._on_lost
        )
        self.receiver = Receiver(
            journal,
            runtime=lambda: control.sessions[WORKER_ID],
            client=control.client,
            lifecycle=self.lifecycle,
            factory=TokenContextFactory(),
            executor=executor,  # type: ignore[arg-type]
            clock=self.clock,
        )
        self.reconciler = Reconciler(self.receipts, self.inspector, grace_ms=0)  # type: ignore[arg-type]
        self.coordinator = Coordinator(journal, control.client, self.receipts, self.clock)
        self.supervisor = StartupSupervisor(
            journal,
            self.reconciler,
            self.coordinator,
            lambda offer_id: (True, None),
            runtime=lambda: control.sessions[WORKER_ID],
            clock=self.clock,
        )

    def _on_lost(self, snapshot: object, reason: LeaseLossReason) -> None:
        self.lost.append((getattr(snapshot, "attempt_id", "?"), reason))
        self.lease_loss.on_lost(snapshot, reason)  # type: ignore[arg-type]


_ids = itertools.count(1)


def run_id() -> str:
    return f"run-{next(_ids):04d}"
