"""A Hypothesis model of the Worker receiver and its recovery, with crashes at every port call
(SPEC §3.5-§3.7, §3.11-§3.15, §3.17 I-J1..I-J6, §3.18; issue 6 item 7, model half).

The system under model is the real Worker runtime of `runners.worker` (`Receiver`,
`WorkerLeaseLifecycle`, `LeaseLossCoordinator`, `Reconciler`, `Coordinator`,
`StartupSupervisor`, `StartupAuditor`, `TerminalRetention`, `cleanup_settled_receipt`) on a
real journal adapter (`FileJournal` by default, `SqliteJournal` with `ADAPTER = "sqlite"`) in
a temporary directory made per machine run. Around it:

- the control plane: the in-memory reference store (`conformance.run.reference.ReferenceStore`,
  the oracle of the Run domain) behind `EngineControlPlane`; 1-3 Runs admitted and granted to
  the Worker `w1` at setup, more later (at most 3 unfinished at a time, 10 per run); one manual
  clock shared by both sides;
- the host: a process table whose children outlive every Worker crash (a child may still
  finish and publish its receipt; the controller kills it), and an in-memory completion
  receipt store read through the production `ReceiptEvidence` and `ReceiptAuthenticator`
  (RV-1..RV-5);
- a crash switch (`FaultSwitch`) between the Worker and every port it uses: journal `create`,
  `replace`, `remove` (crash before, after, inside at the k-th OS call of the file adapter's
  `_Os` seam or the k-th step of the SQLite adapter's `fault_hook`, or an I/O error), `read`
  and `list` (before); every control-plane command (crash before, crash after it committed,
  unavailable, or committed with the response lost) and the control-plane view;
  `Executor.start()` (before, or after the process exists); `ExecutionContextFactory.
  prepare()`; receipt read and delete; the inspector and the controller. Up to three armed
  faults wait at a time, each at the k-th next matching call. A crash is `Crash`, a
  `BaseException`, so it passes every `except Exception` of the Worker as the death of the
  process would; every other thread of that process dies at its next port call; then the
  Worker restarts: the old adapter is released, a new adapter instance acquires the same
  directory, and new Receiver, lease lifecycle, lease-loss coordinator, Reconciler,
  Coordinator and supervisor objects are built (in-flight maps and tracked leases are lost).

Rules: deliver a new Run's first offer (optionally with a fault armed just before); deliver
again (the first, the last or the control plane's current lease version, as `new_claim` or
`lease_recovery`); the `lease_recovery` redelivery; 2-4 threads delivering the same offer at
once; a delivery racing the lease lifecycle's timer thread; arm a fault; kill and restart;
startup recovery (what `WorkerRuntime.start()` runs after acquiring: the audit, the supervisor,
the `fail_start` replays); `WorkerRuntime.poll_completions` (merge the lifecycle's version,
reconcile, untrack settled leases, replay `fail_start`); a child finishes (its receipt
appears); advance the clock; the lifecycle's tick (renewal, loss notification, lease-loss
coordinator); control-plane lease expiry (`runners.passes.lease_expiry_page`); the Worker
session's status; one page of terminal retention. The two WorkerRuntime steps mirror
`runners/worker/runtime.py` with the same building blocks, on this model's own wiring.

Invariants, after every step, each message starting with its SPEC id (`ModelViolation`):
INBOX-04/I-J1 at most one `Executor.start()` per offer over the whole run; I-J2/INBOX-03 the
`launching` revision with this very context's callback pair was durable when `start()` was
called; INBOX-05 `start()` only from a step that found no record, `accepted` or
`starting_acknowledged`; INBOX-06/08 each control-plane command only from the durable state
that calls for it; INBOX-01/02/I-J3 every durable write is a §3.6 row, revision + 1, final
states change only by deletion; INBOX-15 the disk after every step (and across every restart)
is the last durable write; I-J4 `record_violations(record) == ()`; INBOX-03 no journal byte is
a raw callback token; INBOX-34 submit, then `completion_acknowledged`, then the receipt
deletion; CAD-15/INBOX-39/INBOX-41 receipts and records are deleted only when final, receipts
first; INBOX-07/INBOX-10 idempotent redelivery; §3.1 the control plane never holds a `running`
Attempt, a completion or a start failure the Worker did not cause; §3.15 no loss notification
(which stops the process) for a lease the control plane still holds live for the Worker; I-J6
a released adapter refuses every operation; S-1/INBOX-38 no result repr carries a token.

Traces (SPEC §7, component `journal`, profile `worker`), plain JSON Lines written here with
`json` (not `conformance.run.trace`, whose codec is the Run domain's and the journal adapters'):
a header line `{"trace_version", "name", "component", "profile", "seed", "kernel_version",
"description", "capabilities"}`, then one line per step `{"step", "command": {"name",
"args"}, "observed_at_ms", "fault"?, "expect"}`. `args` carry ids, versions, counts and kinds
only, never a token; `fault` is `{"kind", "port", "at"?, "more"?}` with kind in
`crash_before`, `crash_after`, `crash_inside`, `unavailable`, `lost_response`, `io_error`
(`more`: further faults that fired in the same step), or `{"kind": "reopen"}` on the restart
step that follows a crash or a kill; `expect` holds the outcome (`{"kind", "code"}` or
`null`), the journal (`state`, `revision`, `recovery_reason` by offer id), the executor call
counts by offer id, the control plane's Attempt statuses and the receipts present. Every
machine run keeps its trace in memory (`machine.trace_lines()`); with `TRACE_DIR` (class knob)
or `QL3_MODEL_TRACE_DIR` set, teardown writes it to
`<dir>/INBOX-04-worker-<adapter>-<seed>-<serial>.jsonl`. Concurrent steps make thread
interleavings part of a run, so two runs of one example may differ in their traces (never in
the properties).

Running it: `WorkerMachine.TestCase` with `worker_settings(WorkerMachine)` (budgets per
Hypothesis profile in `WORKER_BUDGETS`), `WorkerMachine.configured(ADAPTER="sqlite", ...)` for
knobs, `drive(WorkerMachine(seed=s), random.Random(s), steps)` as the seeded driver, or
`python -m model_tests.worker_machine --steps 20000 --seed 1 [--adapter sqlite]` for a quick
long run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import enum
import functools
import hashlib
import itertools
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Final, cast

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import kernel
from conformance.run.reference import ReferenceStore
from conformance.run.trace import TRACE_VERSION
from kernel.commands import AdmitRun, GrantLease
from kernel.entities import RunAggregate, WorkerSession
from kernel.identity import Secret, token_digest
from kernel.outcomes import Applied
from kernel.specs.budgets import Paging
from kernel.specs.codes import Code
from kernel.specs.journal import (
    FINAL_STATES,
    JOURNAL_TABLE,
    LEASE_LOST_REASONS,
    TRIGGER_REASONS,
    DeliveryKind,
    JournalState,
)
from kernel.specs.states import (
    FINAL_ATTEMPT_STATUSES,
    AttemptStatus,
    CompletionOutcome,
    LeaseStatus,
    Profile,
    ReleaseReason,
    StopResult,
    WorkerSessionStatus,
)
from kernel.worker.control_plane_view import AuthorityFacts, authority_facts, control_plane_view
from kernel.worker.coordinator import CompletionSubmission
from kernel.worker.reconciler import ControlPlaneView, HandleInspection
from kernel.worker.record import JournalRecord, Offer, OfferLease, record_violations
from model_tests.harness import STATS, ModelViolation, require
from model_tests.machines import Budget, budget_settings
from runners.engine import execute
from runners.passes import lease_expiry_page
from runners.worker.auditor import AuditRefused, StartupAuditor
from runners.worker.control_plane import EngineControlPlane, offer_for
from runners.worker.coordinator import Coordinator
from runners.worker.journal.file import FileJournal, _Os
from runners.worker.journal.lock import JournalOwnership, RefreshTimer
from runners.worker.journal.port import JournalError, JournalPage
from runners.worker.journal.sqlite import SqliteJournal
from runners.worker.lease_lifecycle import LeaseLossReason, WorkerLeaseLifecycle
from runners.worker.lease_loss import LeaseLossCoordinator
from runners.worker.ports import (
    ControlPlaneUnavailable,
    ExecutionContext,
    ExecutorRefused,
    LeaseAck,
    PrepareRefused,
)
from runners.worker.posix.adapters import ReceiptEvidence, TokenContextFactory
from runners.worker.posix.receipts import CompletionReceiptStore, Receipt, ReceiptAuthenticator
from runners.worker.receiver import DeliveryResult, Receiver, ResultKind
from runners.worker.reconciler import Reconciler
from runners.worker.retention import TerminalRetention, cleanup_settled_receipt
from runners.worker.runtime import poll_page, replay_start_failures
from runners.worker.supervisor import StartupSupervisor

#: The oracle's own reading of §3.12 step 3 (not the kernel's table): the completion is the
#: control plane's fact once it answered `completed`, or `already_terminal` to a replay.
_COMPLETION_ACCEPTED = frozenset({Code.COMPLETED, Code.ALREADY_TERMINAL})

__all__ = [
    "ADAPTERS",
    "PORTS",
    "WORKER_BUDGETS",
    "WORKER_STATS",
    "Crash",
    "FaultKind",
    "WorkerMachine",
    "drive",
    "worker_settings",
]

S_FINAL = FINAL_STATES
NAME: Final = "worker"
TRACE_DIR_ENV: Final = "QL3_MODEL_TRACE_DIR"
T0: Final = 1_700_000_000_000
DURATION_MS: Final = 30_000
RETENTION_MS: Final = 60_000
WORKER_ID: Final = "w1"
SESSION_ID: Final = "w1-s1"
ADAPTERS: Final = ("file", "sqlite")


class Crash(BaseException):
    """The Worker process dies here (SIGKILL). A `BaseException`, so it passes every `except
    Exception` of the Worker exactly as the death of the process would."""


# -- faults --------------------------------------------------------------------------------------
class FaultKind(enum.StrEnum):
    CRASH_BEFORE = "crash_before"  # the call never happens
    CRASH_AFTER = "crash_after"  # the call took effect (committed, spawned, written), then death
    CRASH_INSIDE = "crash_inside"  # journal writes: death at the k-th OS call / SQLite step
    UNAVAILABLE = "unavailable"  # control plane: not reached (`ControlPlaneUnavailable`)
    LOST_RESPONSE = "lost_response"  # control plane: committed, the response is lost
    IO_ERROR = "io_error"  # journal writes: `JournalError` before anything is written


JOURNAL_WRITES: Final = ("journal.create", "journal.replace", "journal.remove")
CONTROL: Final = (
    "control.acknowledge_starting",
    "control.renew",
    "control.acknowledge_running",
    "control.fail_start",
    "control.complete",
)
PORTS: Final = (
    *JOURNAL_WRITES,
    "journal.read",
    "journal.list",
    *CONTROL,
    "control.view",
    "executor.start",
    "factory.prepare",
    "receipts.read",
    "receipts.delete",
    "inspector.inspect",
    "controller.stop",
)
_EFFECTFUL: Final = frozenset(
    {*JOURNAL_WRITES, *CONTROL, "executor.start", "factory.prepare", "receipts.delete"}
    | {"controller.stop"}
)
#: Which ports each kind applies to (a fault armed for "any port" hits the k-th call of one).
APPLIES: Final[Mapping[FaultKind, frozenset[str]]] = {
    FaultKind.CRASH_BEFORE: frozenset(PORTS),
    FaultKind.CRASH_AFTER: _EFFECTFUL,
    FaultKind.CRASH_INSIDE: frozenset(JOURNAL_WRITES),
    FaultKind.UNAVAILABLE: frozenset(CONTROL),
    FaultKind.LOST_RESPONSE: frozenset(CONTROL),
    FaultKind.IO_ERROR: frozenset(JOURNAL_WRITES),
}


@dataclass
class Armed:
    countdown: int
    kind: FaultKind
    port: str | None  # None: any port the kind applies to
    at: int  # CRASH_INSIDE: die before the at-th OS call / SQLite step (1-based)

    def matches(self, port: str) -> bool:
        """A named port, or (`port is None`) any effectful port the kind applies to: reads
        are crash points only when named, so "any" lands on effects."""
        if port not in APPLIES[self.kind]:
            return False
        return self.port == port if self.port is not None else port in _EFFECTFUL


@dataclass(frozen=True, slots=True)
class Fired:
    kind: FaultKind
    port: str
    at: int | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"kind": self.kind.value, "port": self.port}
        if self.at is not None:
            out["at"] = self.at
        return out


class FaultSwitch:
    """One per machine run (it outlives the restarts; `dead` is per process incarnation).
    Up to `MAX_ARMED` faults wait at a time, each counting down its own matching calls; the
    oldest is dropped when another is armed, and at most one fires per call."""

    MAX_ARMED: ClassVar[int] = 3

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.armed: list[Armed] = []
        self.dead = False
        self.fired: list[Fired] = []

    def arm(self, armed: Armed) -> None:
        with self.lock:
            self.armed = [*self.armed, armed][-self.MAX_ARMED :]

    def enter(self, port: str) -> Fired | None:
        """Called first by every port wrapper: the fault that applies to this call, if any.
        A crash before the call raises here; a dead process dies at every call."""
        with self.lock:
            if self.dead:
                raise Crash(port)
            due: Armed | None = None
            for armed in self.armed:
                if armed.matches(port):
                    armed.countdown -= 1
                    if armed.countdown <= 0 and due is None:
                        due = armed
            if due is None:
                return None
            self.armed.remove(due)
            fired = Fired(due.kind, port, due.at if due.kind is FaultKind.CRASH_INSIDE else None)
            self.fired.append(fired)
            WORKER_STATS.faults[f"{due.kind.value} {port}"] += 1
            if due.kind is FaultKind.CRASH_BEFORE:
                self.dead = True
                raise Crash(port)
            return fired

    def die(self, where: str) -> None:
        with self.lock:
            self.dead = True
        raise Crash(where)


# -- counters ------------------------------------------------------------------------------------
@dataclass
class WorkerStats:
    """Process-wide counters of this model (the step and invariant counts are in
    `model_tests.harness.STATS` under the name "worker")."""

    faults: Counter[str] = field(default_factory=Counter)  # "kind port" -> fired
    restarts: int = 0
    start_calls: int = 0
    concurrent_steps: int = 0
    completions: int = 0  # completion_acknowledged writes
    outcomes: Counter[str] = field(default_factory=Counter)  # "rule kind code"
    traces_written: int = 0

    def by_kind(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for key, n in self.faults.items():
            out[key.split(" ", 1)[0]] += n
        return dict(sorted(out.items()))

    def reset(self) -> None:
        self.faults.clear()
        self.outcomes.clear()
        self.restarts = self.start_calls = self.concurrent_steps = 0
        self.completions = self.traces_written = 0


WORKER_STATS = WorkerStats()


# -- the host: clock, process table, receipts ------------------------------------------------
class ManualClock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


class _FrozenMonotonic:
    """The journal ownership's clock: wall time for the lock mtime, a monotonic clock that
    does not move (the model's refresh timer is a no-op, so a long run must not age the
    ownership past its stale window)."""

    def monotonic_ns(self) -> int:
        return 0

    def time_ns(self) -> int:
        return time.time_ns()


class _NoTimer:
    def __init__(self, interval_s: float, tick: Callable[[], bool]) -> None:
        del interval_s, tick

    def start(self) -> None:
        pass

    def cancel(self) -> None:
        pass

    def join(self, timeout_s: float) -> None:
        pass


def _no_timer(interval_s: float, tick: Callable[[], bool]) -> RefreshTimer:
    return _NoTimer(interval_s, tick)


@dataclass
class Child:
    """A process `Executor.start()` made; it outlives every Worker crash."""

    offer_id: str
    handle: str
    context: ExecutionContext
    alive: bool = True
    killed: bool = False


@dataclass(frozen=True, slots=True)
class PortCall:
    """One entry of the order log (INBOX-34): a committed control-plane command (`code`, and
    whether the process received the answer), a durable journal write (`state`, None for a
    removal) or a receipt deletion."""

    seq: int
    incarnation: int
    port: str
    offer_id: str
    code: Code | None = None
    delivered: bool = True
    state: JournalState | None = None


# -- the ports, wrapped ----------------------------------------------------------------------------
class ModelOs(_Os):
    """The file adapter's OS seam (INBOX-43's): dies before the `crash_at`-th call of a write."""

    def __init__(self, machine: WorkerMachine) -> None:
        self.m = machine
        self.crash_at: int | None = None
        self.calls = 0
        self.open_fds: set[int] = set()

    def _tick(self) -> None:
        if self.crash_at is None:
            return
        self.calls += 1
        if self.calls >= self.crash_at:
            self.crash_at = None
            self.m.switch.dead = True
            raise Crash("journal os")

    def open_temporary(self, path: Path) -> int:
        self._tick()
        fd = super().open_temporary(path)
        self.open_fds.add(fd)
        return fd

    def fchmod(self, fd: int, mode: int) -> None:
        self._tick()
        super().fchmod(fd, mode)

    def write(self, fd: int, data: memoryview) -> int:
        self._tick()
        return super().write(fd, data)

    def fsync(self, fd: int) -> None:
        self._tick()
        super().fsync(fd)

    def close(self, fd: int) -> None:
        self._tick()
        super().close(fd)
        self.open_fds.discard(fd)

    def link(self, source: Path, target: Path) -> None:
        self._tick()
        super().link(source, target)

    def rename(self, source: Path, target: Path) -> None:
        self._tick()
        super().rename(source, target)

    def unlink(self, path: Path) -> None:
        self._tick()
        super().unlink(path)

    def fsync_directory(self, path: Path) -> None:
        self._tick()
        super().fsync_directory(path)

    def reap(self) -> None:
        """The dead process's descriptors are closed by the OS."""
        for fd in sorted(self.open_fds):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.open_fds.clear()


class SqliteCrashHook:
    """The SQLite adapter's `fault_hook`: dies at the `crash_at`-th step of a mutation."""

    def __init__(self, machine: WorkerMachine) -> None:
        self.m = machine
        self.crash_at: int | None = None
        self.calls = 0

    def __call__(self, step: str, connection: object) -> None:
        if self.crash_at is None:
            return
        self.calls += 1
        if self.calls >= self.crash_at:
            self.crash_at = None
            self.m.switch.dead = True
            raise Crash(f"sqlite {step}")


class ModelJournal:
    """`JournalStore` (plus `capacity`) around the real adapter: faults, the order log, and the
    durable-write history the invariants check."""

    def __init__(self, machine: WorkerMachine, inner: FileJournal | SqliteJournal) -> None:
        self.m = machine
        self.inner = inner

    def __repr__(self) -> str:
        return "ModelJournal()"

    @property
    def capacity(self) -> int:
        return self.inner.capacity

    def read(self, offer_id: str) -> JournalRecord | None:
        self.m.switch.enter("journal.read")
        return self.inner.read(offer_id)

    def list(self, after: str | None, limit: int) -> JournalPage:
        self.m.switch.enter("journal.list")
        return self.inner.list(after, limit)

    def create(self, record: JournalRecord) -> None:
        self._write("journal.create", record.offer_id, record, lambda: self.inner.create(record))

    def replace(self, record: JournalRecord, expected_revision: int) -> None:
        self._write(
            "journal.replace",
            record.offer_id,
            record,
            lambda: self.inner.replace(record, expected_revision),
        )

    def remove(self, offer_id: str, expected_revision: int) -> None:
        self._write(
            "journal.remove", offer_id, None, lambda: self.inner.remove(offer_id, expected_revision)
        )

    def _write(
        self, port: str, offer_id: str, record: JournalRecord | None, call: Callable[[], None]
    ) -> None:
        m = self.m
        fired = m.switch.enter(port)
        kind = None if fired is None else fired.kind
        if kind is FaultKind.IO_ERROR:
            raise JournalError(Code.JOURNAL_PERMISSIONS, "write:EIO")
        with m.write_lock:
            if port == "journal.remove":
                m.check_removal(offer_id)
            pending = (port, offer_id, record)
            m.in_doubt.append(pending)
            if kind is FaultKind.CRASH_INSIDE:
                assert fired is not None
                assert fired.at is not None
                m.arm_inside(fired.at)
            try:
                call()
            except JournalError:
                m.disarm_inside()
                if kind in (FaultKind.CRASH_AFTER, FaultKind.CRASH_INSIDE):
                    m.switch.die(port)  # the write failed, then the process died
                raise  # stays in doubt: resolved against the disk after the step
            m.disarm_inside()
            m.in_doubt.remove(pending)
            m.durable_write(port, offer_id, record)
        if kind in (FaultKind.CRASH_AFTER, FaultKind.CRASH_INSIDE):
            m.switch.die(port)  # written, then the process died (or the write had fewer steps)


class ModelClient:
    """`ControlPlaneClient` around `EngineControlPlane`: faults and the order log."""

    def __init__(self, machine: WorkerMachine, inner: EngineControlPlane) -> None:
        self.m = machine
        self.inner = inner

    def __repr__(self) -> str:
        return "ModelClient()"

    def _call(
        self, name: str, offer_id: str, call: Callable[[], LeaseAck], check: Callable[[], None]
    ) -> LeaseAck:
        m = self.m
        port = f"control.{name}"
        fired = m.switch.enter(port)
        kind = None if fired is None else fired.kind
        if kind is FaultKind.UNAVAILABLE:
            raise ControlPlaneUnavailable("model")
        if m.concurrent:
            time.sleep(0.002)  # widen the window in which duplicates join the one in flight
        m.check_ack_state(name, offer_id)
        check()
        answer = call()
        m.counts.commands += 1
        delivered = kind is None
        m.log(port, offer_id, code=answer.code, delivered=delivered)
        if kind is FaultKind.CRASH_AFTER:
            m.switch.die(port)
        if kind is FaultKind.LOST_RESPONSE:
            raise ControlPlaneUnavailable("model")
        return answer

    def acknowledge_starting(self, lease: OfferLease) -> LeaseAck:
        return self._call(
            "acknowledge_starting",
            self.m.offer_of(lease.attempt_id),
            lambda: self.inner.acknowledge_starting(lease),
            lambda: None,
        )

    def renew(self, lease: OfferLease, duration_ms: int) -> LeaseAck:
        return self._call(
            "renew",
            self.m.offer_of(lease.attempt_id),
            lambda: self.inner.renew(lease, duration_ms),
            lambda: None,
        )

    def acknowledge_running(
        self, lease: OfferLease, executor_handle: str, started_at_ms: int
    ) -> LeaseAck:
        offer_id = self.m.offer_of(lease.attempt_id)
        return self._call(
            "acknowledge_running",
            offer_id,
            lambda: self.inner.acknowledge_running(lease, executor_handle, started_at_ms),
            lambda: self.m.check_running_ack(offer_id, executor_handle),
        )

    def fail_start(self, lease: OfferLease, failure_code: str) -> LeaseAck:
        offer_id = self.m.offer_of(lease.attempt_id)
        return self._call(
            "fail_start",
            offer_id,
            lambda: self.inner.fail_start(lease, failure_code),
            lambda: self.m.check_fail_start(offer_id),
        )

    def complete(self, submission: CompletionSubmission) -> LeaseAck:
        offer_id = self.m.offer_of(submission.attempt_id)
        return self._call(
            "complete",
            offer_id,
            lambda: self.inner.complete(submission),
            lambda: self.m.check_submission(offer_id, submission),
        )

    def read_authority(
        self, run_id: str, attempt_id: str, lease_generation: int
    ) -> AuthorityFacts | None:
        return self.inner.read_authority(run_id, attempt_id, lease_generation)


class ModelFactory:
    """`ExecutionContextFactory`: the real `TokenContextFactory` (a fresh token per Attempt),
    a scripted refusal for Runs whose behaviour is `prepare_refuse`, and faults."""

    def __init__(self, machine: WorkerMachine) -> None:
        self.m = machine
        self.inner = TokenContextFactory()

    def __repr__(self) -> str:
        return "ModelFactory()"

    def prepare(self, record: JournalRecord, executor_started_at_ms: int) -> ExecutionContext:
        fired = self.m.switch.enter("factory.prepare")
        context = self.inner.prepare(record, executor_started_at_ms)
        with self.m.write_lock:
            self.m.callback_tokens.append(context.callback_token.reveal())
        if fired is not None:
            self.m.switch.die("factory.prepare")
        if self.m.behaviour_of(record.offer_id) == "prepare_refuse":
            raise PrepareRefused("MODEL_PREPARE_REFUSED")
        return context


class ModelExecutor:
    """`Executor`: counts every call per offer id (the spawn journal of this model: it lives
    outside the Worker and survives every restart) and checks the crash barrier."""

    def __init__(self, machine: WorkerMachine) -> None:
        self.m = machine

    def __repr__(self) -> str:
        return "ModelExecutor()"

    def start(self, context: ExecutionContext) -> str:
        m = self.m
        fired = m.switch.enter("executor.start")
        m.record_start(context)
        behaviour = m.behaviour_of(context.offer_id)
        if behaviour == "refuse":
            if fired is not None:
                m.switch.die("executor.start")
            raise ExecutorRefused("MODEL_START_REFUSED")
        handle = f"model:{context.attempt_id}:{m.start_calls[context.offer_id]}"
        m.spawn(Child(context.offer_id, handle, context))
        if fired is not None:
            m.switch.die("executor.start")  # the process exists; the handle is lost
        if behaviour == "ambiguous":
            raise RuntimeError("model: start handshake lost")  # the process may run
        return handle


class HostReceipts:
    """The receipt files on the host (they outlive the Worker): read and delete through the
    crash switch, as `CompletionReceiptStore` (for `ReceiptEvidence`) and as retention's
    receipt port."""

    def __init__(self, machine: WorkerMachine) -> None:
        self.m = machine
        self.files: dict[str, Receipt] = {}
        self.published: dict[str, Receipt] = {}  # every receipt ever published, by Attempt

    def __repr__(self) -> str:
        return "HostReceipts()"

    def publish(self, receipt: Receipt) -> None:
        self.files[receipt.attempt_id] = receipt
        self.published[receipt.attempt_id] = receipt

    def read(self, attempt_id: str) -> Receipt | None:
        self.m.switch.enter("receipts.read")
        return self.files.get(attempt_id)

    def delete(self, attempt_id: str) -> None:
        m = self.m
        fired = m.switch.enter("receipts.delete")
        offer_id = m.offer_of(attempt_id)
        m.check_receipt_delete(offer_id)
        self.files.pop(attempt_id, None)
        m.log("receipts.delete", offer_id)
        if fired is not None:
            m.switch.die("receipts.delete")


class ModelInspector:
    def __init__(self, machine: WorkerMachine) -> None:
        self.m = machine

    def inspect(self, executor_handle: str) -> HandleInspection:
        self.m.switch.enter("inspector.inspect")
        child = self.m.child_by_handle(executor_handle)
        if child is None:
            return HandleInspection.INVALID
        return HandleInspection.RUNNING if child.alive else HandleInspection.EXITED


class ModelController:
    def __init__(self, machine: WorkerMachine) -> None:
        self.m = machine

    def stop(self, executor_handle: str) -> StopResult | str:
        fired = self.m.switch.enter("controller.stop")
        child = self.m.child_by_handle(executor_handle)
        if child is None:
            answer: StopResult | str = "invalid"
        elif child.alive:
            child.alive = False
            child.killed = True
            answer = StopResult.TERMINATION_REQUESTED
        else:
            answer = StopResult.ALREADY_EXITED
        if fired is not None:
            self.m.switch.die("controller.stop")
        return answer


@dataclass
class WorkerProcess:
    """One incarnation of the Worker runtime (everything a restart rebuilds)."""

    incarnation: int
    inner: FileJournal | SqliteJournal
    journal: ModelJournal
    receiver: Receiver
    lifecycle: WorkerLeaseLifecycle
    lease_loss: LeaseLossCoordinator
    supervisor: StartupSupervisor


@dataclass
class RunState:
    run_id: str
    attempt_id: str
    token: Secret
    spec: dict[str, object]
    behaviour: str
    first: Offer
    last: Offer
    offer_id: str


# -- budgets ----------------------------------------------------------------------------------
#: Per Hypothesis profile and adapter. ci (derandomized): ~7,000 steps on the file adapter and
#: ~1,700 on SQLite, well under a minute together; deep: randomized, about 20x that.
WORKER_BUDGETS: Final[Mapping[str, Mapping[str, Budget]]] = {
    "ci": {"file": Budget(300, 40), "sqlite": Budget(80, 40)},
    "dev": {"file": Budget(300, 40), "sqlite": Budget(80, 40)},
    "deep": {"file": Budget(2_500, 60), "sqlite": Budget(800, 60)},
}


def worker_settings(machine: type[WorkerMachine], profile: str | None = None) -> settings:
    """The active profile's settings with this machine's budget (by its `ADAPTER`)."""
    name = profile if profile is not None else settings.get_current_profile_name()
    budget = WORKER_BUDGETS.get(name, WORKER_BUDGETS["ci"])[machine.ADAPTER]
    return budget_settings(budget, profile)


# -- argument domains (shared by the Hypothesis rules and the seeded driver) -------------------
BEHAVIOURS: Final = ("ok", "ok", "ok", "ok", "refuse", "ambiguous", "prepare_refuse")
RUN_PICKS: Final = (0, 1, 2)
VERSIONS: Final = ("current", "current", "current", "first", "last")
KINDS: Final = (DeliveryKind.NEW_CLAIM, DeliveryKind.LEASE_RECOVERY)
THREADS: Final = (2, 3, 4)
COUNTDOWNS: Final = (1, 1, 2, 2, 3, 3, 4, 5, 6, 7, 8, 10, 12)
FAULT_KINDS: Final = tuple(FaultKind)
FAULT_PORTS: Final[tuple[str | None, ...]] = (*(None,) * 8, *PORTS)
INSIDE_AT: Final = tuple(range(1, 9))
FaultSpec = tuple[int, FaultKind, str | None, int]  # countdown, kind, port (None: any), at
FAULT_SPECS: Final = st.tuples(
    st.sampled_from(COUNTDOWNS),
    st.sampled_from(FAULT_KINDS),
    st.sampled_from(FAULT_PORTS),
    st.sampled_from(INSIDE_AT),
)


def _draw_fault(rng: random.Random) -> FaultSpec | None:
    """The seeded driver's counterpart of `st.none() | FAULT_SPECS`."""
    if rng.random() < 0.5:
        return None
    return (
        rng.choice(COUNTDOWNS),
        rng.choice(FAULT_KINDS),
        rng.choice(FAULT_PORTS),
        rng.choice(INSIDE_AT),
    )


EXIT_CODES: Final = (0, 0, 1)
ADVANCES: Final = (500, 2_000, 5_000, 10_000, 15_000)
SESSIONS: Final = (
    WorkerSessionStatus.ONLINE,
    WorkerSessionStatus.ONLINE,
    WorkerSessionStatus.DRAINING,
    WorkerSessionStatus.OFFLINE,
)

#: A driver argument domain: values to choose from, or a function of the driver's RNG.
Domain = Sequence[Any] | Callable[[random.Random], Any]

_serials = itertools.count(1)
_MAY_SPAWN_FROM: Final = frozenset(
    {None, JournalState.ACCEPTED, JournalState.STARTING_ACKNOWLEDGED}
)
#: §3.6/§3.7: the durable states from which each Worker command may be sent.
_ACK_STATES: Final[Mapping[str, frozenset[JournalState]]] = {
    "acknowledge_starting": frozenset({JournalState.ACCEPTED}),
    "acknowledge_running": frozenset({JournalState.STARTED}),
    "fail_start": frozenset({JournalState.START_FAILED}),
    "complete": frozenset(
        {JournalState.STARTED, JournalState.RUNNING_ACKNOWLEDGED, JournalState.RECOVERY_REQUIRED}
    ),
}
#: §3.7: states whose redelivery only replays (no ACK, no spawn) and so writes at most a lease.
_REPLAY_ONLY: Final = frozenset(
    {
        JournalState.RUNNING_ACKNOWLEDGED,
        JournalState.RECOVERY_REQUIRED,
        JournalState.COMPLETION_ACKNOWLEDGED,
        JournalState.START_FAILURE_ACKNOWLEDGED,
    }
)


def _moves() -> dict[tuple[JournalState, JournalState], frozenset[object]]:
    """§3.6 as (from, to) -> the recovery reasons the row may write (`keep` rows: `"keep"`)."""
    out: dict[tuple[JournalState, JournalState], set[object]] = {}
    for edge in JOURNAL_TABLE.edges():
        source, dest = edge.source, edge.target
        if source is None or dest is None:
            continue
        reasons: set[object] = set(TRIGGER_REASONS.get(edge.trigger, ()))
        if not reasons:  # a self-loop that writes no reason keeps the state: the lease row
            reasons = {"keep"} if dest is source else {None}
        out.setdefault((source, dest), set()).update(reasons)
    return {k: frozenset(v) for k, v in out.items()}


MOVES: Final = _moves()


class WorkerMachine(RuleBasedStateMachine):
    """See the module docstring. Class-level knobs (`configured(...)`): `ADAPTER`,
    `RECEIVER` (a `Receiver` subclass, e.g. a planted bug), `FAULT_KINDS`, `FAULT_PORTS`,
    `CONCURRENCY`, `TRACE_DIR`."""

    ADAPTER: ClassVar[str] = "file"
    RECEIVER: ClassVar[type[Receiver]] = Receiver
    FAULT_KINDS: ClassVar[tuple[FaultKind, ...]] = FAULT_KINDS
    FAULT_PORTS: ClassVar[tuple[str | None, ...]] = FAULT_PORTS
    CONCURRENCY: ClassVar[bool] = True
    TRACE_DIR: ClassVar[str | None] = None
    MAX_LIVE_RUNS: ClassVar[int] = 3
    MAX_RUNS: ClassVar[int] = 10

    def __init__(self, *, seed: int = 0) -> None:
        super().__init__()
        self.seed = seed
        self.serial = next(_serials)
        self.ready = False
        self.switch = FaultSwitch()
        self.write_lock = threading.RLock()
        self.clock = ManualClock()
        self.concurrent = False
        self.violations: list[str] = []
        self.calls: list[PortCall] = []
        self._seq = itertools.count()
        self.incarnation = 0
        # the host and the spawn journal (outlive every restart)
        self.children: dict[str, Child] = {}
        self.start_calls: Counter[str] = Counter()
        self.callback_tokens: list[str] = []
        self.receipts = HostReceipts(self)
        # durable journal history: offer id -> revisions (None: deleted), and writes in doubt
        self.history: dict[str, list[JournalRecord | None]] = {}
        self.in_doubt: list[tuple[str, str, JournalRecord | None]] = []
        self.disk: dict[str, JournalRecord] = {}
        self.step_start_state: dict[str, JournalState | None] = {}
        self.runs: list[RunState] = []
        self.by_attempt: dict[str, RunState] = {}
        self.by_offer: dict[str, RunState] = {}
        self.retention_cursor: str | None = None
        self.reprs: list[str] = []
        self.lines: list[dict[str, object]] = []
        self._step_index = 0
        self._fired_before = 0
        self._root: Path | None = None
        self._tmp: Path | None = None
        self._os: ModelOs | None = None
        self._hook: SqliteCrashHook | None = None
        self._old: list[FileJournal | SqliteJournal] = []
        self.counts = STATS.of(NAME)
        self.counts.instances += 1

    @classmethod
    def configured(cls, **knobs: object) -> type[WorkerMachine]:
        unknown = sorted(k for k in knobs if not k.isupper() or not hasattr(cls, k))
        if unknown:
            raise TypeError(f"{cls.__name__} has no knob(s) {unknown}")
        return type(f"{cls.__name__}Configured", (cls,), dict(knobs))

    # -- setup -------------------------------------------------------------------------------
    @initialize(
        runs=st.integers(1, 3),
        behaviours=st.lists(st.sampled_from(BEHAVIOURS), min_size=3, max_size=3),
    )
    def setup(self, runs: int, behaviours: list[str]) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix="ql3-worker-model-"))
        self._root = self._tmp / "journal"
        self.sessions: dict[str, WorkerSession] = {WORKER_ID: _session()}
        self.store = ReferenceStore()
        self.engine = EngineControlPlane(
            self.store, lambda _tx, worker_id: self.sessions.get(worker_id), self.clock
        )
        self.client = ModelClient(self, self.engine)
        self.factory = ModelFactory(self)
        self.executor = ModelExecutor(self)
        self.inspector = ModelInspector(self)
        self.controller = ModelController(self)
        self.evidence = ReceiptEvidence(
            cast(CompletionReceiptStore, self.receipts), ReceiptAuthenticator()
        )
        for index in range(runs):
            self._admit(index, behaviours[index])
        self.w = self._boot()
        self.ready = True
        self._begin()
        args = {"runs": runs, "behaviours": behaviours[:runs], "adapter": self.ADAPTER}
        self._finish("setup", args, None)

    def _admit(self, index: int, behaviour: str) -> None:
        run_id = f"wm-run-{index + 1}"
        attempt_id = f"{run_id}-a1"
        admitted = execute(
            self.store, AdmitRun(run_id, attempt_id, "proj", "task", 1, "shell"), self.clock()
        )
        assert isinstance(admitted, Applied), admitted
        self.clock.advance(1)
        raw = hashlib.sha256(
            f"ql3-worker-model:{self.seed}:{self.serial}:{attempt_id}".encode()
        ).hexdigest()
        token = Secret.of(raw, "lease_token")
        granted = execute(
            self.store,
            GrantLease(run_id, attempt_id, self.sessions[WORKER_ID], token, DURATION_MS),
            self.clock(),
        )
        assert isinstance(granted, Applied), granted
        self.clock.advance(1)
        spec: dict[str, object] = {
            "run_id": run_id,
            "attempt_id": attempt_id,
            "project_id": "proj",
            "task_id": "task",
            "task_revision": 1,
            "argv": ["true"],
        }
        agg = self._aggregate(attempt_id)
        assert agg is not None
        offer = offer_for(agg, attempt_id, token, spec)
        state = RunState(run_id, attempt_id, token, spec, behaviour, offer, offer, offer.offer_id)
        self.runs.append(state)
        self.by_attempt[attempt_id] = state
        self.by_offer[offer.offer_id] = state

    def _new_inner(self) -> FileJournal | SqliteJournal:
        assert self._root is not None
        ownership = JournalOwnership(self._root, clock=_FrozenMonotonic(), timer_factory=_no_timer)
        if self.ADAPTER == "sqlite":
            self._hook = SqliteCrashHook(self)
            return SqliteJournal(self._root, ownership, fault_hook=self._hook)
        self._os = ModelOs(self)
        return FileJournal(self._root, ownership, _os=self._os)

    def _boot(self) -> WorkerProcess:
        """A new Worker process on the journal directory: a new adapter instance acquires it
        and every runtime object is new."""
        self.incarnation += 1
        inner = self._new_inner()
        inner.acquire()
        journal = ModelJournal(self, inner)
        runtime = self._runtime
        clock = self.clock
        lease_loss = LeaseLossCoordinator(journal, self.controller, clock)

        def on_lost(snapshot: OfferLease, reason: LeaseLossReason) -> None:
            self.check_loss(snapshot, reason)
            outcome = lease_loss.on_lost(snapshot, reason)
            self.reprs.append(repr(outcome))

        lifecycle = WorkerLeaseLifecycle(
            self.client, duration_ms=DURATION_MS, on_lost=on_lost, clock=clock
        )
        receiver = self.RECEIVER(
            journal,
            runtime=runtime,
            client=self.client,
            lifecycle=lifecycle,
            factory=self.factory,
            executor=self.executor,
            clock=clock,
        )
        reconciler = Reconciler(self.evidence, self.inspector, grace_ms=0, sleep=_no_sleep)
        coordinator = Coordinator(journal, self.client, self.evidence, clock)
        supervisor = StartupSupervisor(
            journal,
            reconciler,
            coordinator,
            self._clean_receipt_of(journal),
            runtime=runtime,
            clock=clock,
            view=self._view,
        )
        return WorkerProcess(
            self.incarnation, inner, journal, receiver, lifecycle, lease_loss, supervisor
        )

    def _runtime(self) -> WorkerSession:
        return self.sessions[WORKER_ID]

    def _clean_receipt_of(self, journal: ModelJournal) -> Callable[[str], tuple[bool, Code | None]]:
        """The supervisor's `settled_completion` action (§3.13)."""

        def clean(offer_id: str) -> tuple[bool, Code | None]:
            result = cleanup_settled_receipt(journal, self.receipts, offer_id)
            self.reprs.append(repr(result))
            code = result.code if isinstance(result.code, Code) else None
            return result.settled, code

        return clean

    def _view(self, record: JournalRecord) -> ControlPlaneView | None:
        """The optional control-plane view of §3.11 (E-3: the kernel's view of the control
        plane's authority facts): a control-plane read, so a port."""
        self.switch.enter("control.view")
        lease = record.offer.lease
        facts = authority_facts(
            self._aggregate(lease.attempt_id),
            lease.run_id,
            lease.attempt_id,
            lease.lease_generation,
        )
        return None if facts is None else control_plane_view(record, facts)

    def _restart(self) -> None:
        """Release the old incarnation's ownership (a dead process's lock would go stale; the
        model releases it at once), reap its descriptors, boot a new one."""
        old = self.w
        if self._os is not None:
            self._os.reap()
        try:
            old.inner.release()
        except JournalError as exc:
            self.violations.append(f"I-J6: the old owner could not release: {exc.code}")
        self._old.append(old.inner)
        self.switch.dead = False  # faults still armed stay armed for the new process
        self.w = self._boot()
        WORKER_STATS.restarts += 1
        # I-J6: the released adapter refuses every operation from now on.
        for offer_id in list(self.disk)[:1]:
            try:
                old.inner.read(offer_id)
            except JournalError:
                pass
            else:
                self.violations.append("I-J6: a released journal adapter still reads")

    def teardown(self) -> None:
        if not self.ready:
            return
        with contextlib.suppress(Exception):
            self.w.inner.release()
        if self._os is not None:
            self._os.reap()
        for inner in self._old:
            if isinstance(inner, SqliteJournal):
                with contextlib.suppress(Exception):
                    inner.close()
        self._write_trace()
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
        self.ready = False

    # -- model knowledge -----------------------------------------------------------------------
    def _aggregate(self, attempt_id: str) -> RunAggregate | None:
        with self.store.transaction() as tx:
            return tx.load_run_of_attempt(attempt_id)

    def offer_of(self, attempt_id: str) -> str:
        state = self.by_attempt.get(attempt_id)
        return "" if state is None else state.offer_id

    def behaviour_of(self, offer_id: str) -> str:
        state = self.by_offer.get(offer_id)
        return "ok" if state is None else state.behaviour

    def child_by_handle(self, handle: str) -> Child | None:
        for child in self.children.values():
            if child.handle == handle:
                return child
        return None

    def spawn(self, child: Child) -> None:
        with self.write_lock:
            self.children[child.offer_id] = child

    def log(
        self,
        port: str,
        offer_id: str,
        *,
        code: Code | None = None,
        delivered: bool = True,
        state: JournalState | None = None,
    ) -> None:
        with self.write_lock:
            self.calls.append(
                PortCall(next(self._seq), self.incarnation, port, offer_id, code, delivered, state)
            )

    def _pick(self, run: int) -> RunState:
        """One of the three most recently admitted Runs."""
        recent = self.runs[-3:]
        return recent[run % len(recent)]

    def _offer(self, state: RunState, version: str, kind: DeliveryKind) -> Offer:
        """The offer a dispatcher would send: the first one, the last one sent, or the one
        for the control plane's current lease (when it is still leased)."""
        if version == "first":
            return _with_kind(state.first, kind)
        if version == "current":
            agg = self._aggregate(state.attempt_id)
            if agg is not None and agg.leased_lease(state.attempt_id) is not None:
                return offer_for(agg, state.attempt_id, state.token, state.spec, kind)
        return _with_kind(state.last, kind)

    # -- checks the wrappers run at the call (recorded, raised by the invariants) -----------
    def record_start(self, context: ExecutionContext) -> None:
        """I-J1 count; INBOX-05/06: only from a step that found no record, `accepted` or
        `starting_acknowledged`; I-J2/INBOX-03: the `launching` barrier with the callback pair
        of this very context is durable now."""
        offer_id = context.offer_id
        with self.write_lock:
            self.start_calls[offer_id] += 1
            WORKER_STATS.start_calls += 1
            before = self.step_start_state.get(offer_id)
            if before not in _MAY_SPAWN_FROM:
                self.violations.append(
                    f"INBOX-05: Executor.start() for {offer_id[:12]} in a step that found it "
                    f"{before} (only a first start may spawn)"
                )
            try:
                durable = self.w.inner.read(offer_id)
            except JournalError as exc:
                self.violations.append(f"I-J2: the journal could not be read at start: {exc}")
                return
            pair = (
                context.callback_sequence,
                token_digest(context.callback_token.reveal()),
                context.executor_started_at_ms,
            )

            def carries(r: JournalRecord | None) -> bool:
                return r is not None and pair == (
                    r.callback_sequence,
                    r.callback_token_sha256,
                    r.executor_started_at_ms,
                )

            # Durable `launching` with this context's pair; only a lease-loss write (a timer
            # thread racing the start) may have superseded it since, keeping the pair.
            ok = (
                carries(durable)
                and durable is not None
                and (
                    durable.state is JournalState.LAUNCHING
                    or durable.recovery_reason in LEASE_LOST_REASONS
                )
                and any(
                    r is not None and r.state is JournalState.LAUNCHING and carries(r)
                    for r in self.history.get(offer_id, ())
                )
            )
            if not ok:
                state = None if durable is None else durable.state
                self.violations.append(
                    f"I-J2/INBOX-03: Executor.start() for {offer_id[:12]} without its durable "
                    f"`launching` barrier and callback pair (found {state})"
                )

    def check_loss(self, snapshot: OfferLease, reason: LeaseLossReason) -> None:
        """§3.15: a lease is reported lost only when renewal is rejected because it is: the
        control plane no longer holds it `leased` for this authority, it expired, or the
        Worker session is not current; or when the expiry the lifecycle knows has passed (it
        cannot know of a renewal whose answer was lost, and stopping is the safe side). A
        loss notification makes the lease-loss coordinator stop the local process."""
        if reason is LeaseLossReason.LEASE_EXPIRED and snapshot.expires_at_ms <= self.clock():
            return
        agg = self._aggregate(snapshot.attempt_id)
        row = None if agg is None else agg.lease(snapshot.attempt_id, snapshot.lease_generation)
        session = self.sessions[WORKER_ID]
        now = self.clock()
        live = (
            row is not None
            and row.status is LeaseStatus.LEASED
            and row.token_digest == snapshot.lease_token.digest()
            and row.expires_at_ms > now
            and session.status is not WorkerSessionStatus.OFFLINE
            and session.session_expires_at_ms > now
        )
        if live:
            assert row is not None
            self.violations.append(
                f"§3.15: lease of {snapshot.attempt_id} reported lost ({reason}) while the "
                f"control plane holds it leased for this Worker (version {row.version}, the "
                f"lifecycle held {snapshot.version})"
            )

    def check_ack_state(self, name: str, offer_id: str) -> None:
        """§3.6/§3.7 (INBOX-06, INBOX-08): each command only from the durable state that
        calls for it, so a redelivery or restart that finds `started` replays only the running
        ACK and one that finds `start_failed` only `fail_start` (a lease-loss write racing on
        the timer thread may have superseded the state since)."""
        allowed = _ACK_STATES.get(name)
        if allowed is None:
            return
        record = self._current(offer_id)
        state = None if record is None else record.state
        if state in allowed or (
            record is not None and record.recovery_reason in LEASE_LOST_REASONS
        ):
            return
        self.violations.append(
            f"INBOX-06/INBOX-08: {name} for {offer_id[:12]} while its durable record is "
            f"{state} (§3.7: only from {sorted(str(s) for s in allowed)})"
        )

    def check_running_ack(self, offer_id: str, handle: str) -> None:
        child = self.children.get(offer_id)
        if child is None or child.handle != handle:
            self.violations.append(
                f"§3.1/INBOX-06: acknowledge_running for {offer_id[:12]} with a handle of no "
                "process this Worker started"
            )

    def check_fail_start(self, offer_id: str) -> None:
        if offer_id in self.children:
            self.violations.append(
                f"INBOX-08/§3.5: fail_start for {offer_id[:12]} whose process exists "
                "(an ambiguous start is never a start failure)"
            )

    def check_submission(self, offer_id: str, submission: CompletionSubmission) -> None:
        receipt = self.receipts.files.get(submission.attempt_id)
        if receipt is None or (
            receipt.callback_sequence,
            receipt.outcome,
            receipt.exit_code,
        ) != (submission.callback_sequence, submission.outcome, submission.exit_code):
            self.violations.append(
                f"INBOX-34/§3.1: complete_with_lease for {offer_id[:12]} without its receipt "
                "(no fake completion)"
            )

    def check_receipt_delete(self, offer_id: str) -> None:
        record = self._current(offer_id)
        if record is None or record.state is not JournalState.COMPLETION_ACKNOWLEDGED:
            state = None if record is None else record.state
            self.violations.append(
                f"INBOX-34/CAD-15: receipt of {offer_id[:12]} deleted while the journal "
                f"record is {state} (only after completion_acknowledged is durable)"
            )

    def check_removal(self, offer_id: str) -> None:
        record = self._current(offer_id)
        if record is None or record.state not in S_FINAL:
            state = None if record is None else record.state
            self.violations.append(
                f"INBOX-39/INBOX-41: journal record {offer_id[:12]} removed in {state} "
                "(retention deletes only final records)"
            )
            return
        if record.state is JournalState.COMPLETION_ACKNOWLEDGED and (
            record.offer.lease.attempt_id in self.receipts.files
        ):
            self.violations.append(
                f"INBOX-39: journal record {offer_id[:12]} removed before its receipt"
            )

    def arm_inside(self, at: int) -> None:
        if self._os is not None:
            self._os.crash_at, self._os.calls = at, 0
        if self._hook is not None:
            self._hook.crash_at, self._hook.calls = at, 0

    def disarm_inside(self) -> None:
        if self._os is not None:
            self._os.crash_at = None
        if self._hook is not None:
            self._hook.crash_at = None

    # -- the durable history (I-J3, I-J4, INBOX-01, INBOX-02, INBOX-15) -------------------------
    def _current(self, offer_id: str) -> JournalRecord | None:
        revisions = self.history.get(offer_id)
        return None if not revisions else revisions[-1]

    def durable_write(self, port: str, offer_id: str, record: JournalRecord | None) -> None:
        """One write is durable: it must follow §3.6 from the last durable revision."""
        prev = self._current(offer_id)
        bad = self.violations.append
        if port == "journal.create":
            assert record is not None
            if prev is not None:
                bad(f"I-J3: create over a live record {offer_id[:12]}")
            if record.revision != 0 or record.state is not JournalState.ACCEPTED:
                bad(f"INBOX-02: a first publish at revision {record.revision} in {record.state}")
        elif port == "journal.replace":
            assert record is not None
            self._check_replace(offer_id, prev, record)
        elif prev is None or prev.state not in S_FINAL:
            state = None if prev is None else prev.state
            bad(f"I-J3: {offer_id[:12]} deleted from {state} (only final records are deleted)")
        if record is not None:
            found = record_violations(record)
            if found:
                bad(f"I-J4: durable revision {record.revision} breaks §3.3: {found}")
            if record.state is JournalState.COMPLETION_ACKNOWLEDGED:
                WORKER_STATS.completions += 1
                self._check_completion_order(offer_id)
        self.history.setdefault(offer_id, []).append(record)
        self.log(port, offer_id, state=None if record is None else record.state)

    def _check_replace(self, offer_id: str, prev: JournalRecord | None, new: JournalRecord) -> None:
        bad = self.violations.append
        if prev is None:
            bad(f"I-J3: replace of {offer_id[:12]} without a durable revision")
            return
        if new.revision != prev.revision + 1:
            bad(f"I-J3/INBOX-02: revision {prev.revision} -> {new.revision} (must be +1)")
        if prev.state in S_FINAL:
            bad(f"I-J3: final {prev.state} of {offer_id[:12]} replaced by {new.state}")
            return
        allowed = MOVES.get((prev.state, new.state))
        if prev.state is new.state and prev.recovery_reason == new.recovery_reason:
            ok = (
                allowed is not None
                and "keep" in allowed
                and new.offer.lease.version > prev.offer.lease.version
                and new.offer.lease.same_authority(prev.offer.lease)
            )
        elif (
            new.state is JournalState.RECOVERY_REQUIRED
            and prev.state is JournalState.RECOVERY_REQUIRED
        ):
            ok = (
                prev.recovery_reason not in LEASE_LOST_REASONS
                and new.recovery_reason in LEASE_LOST_REASONS
            )
        else:
            ok = allowed is not None and (
                new.recovery_reason in allowed or (None in allowed and new.recovery_reason is None)
            )
        if not ok:
            bad(
                f"INBOX-01: {prev.state}({prev.recovery_reason}) -> "
                f"{new.state}({new.recovery_reason}) is not a row of §3.6"
            )
        if new.updated_at_ms < prev.updated_at_ms:
            bad("INBOX-02: updated_at_ms went backwards")
        if prev.executor_started_at_ms is not None and (
            new.executor_started_at_ms != prev.executor_started_at_ms
        ):
            bad("§3.3: executor_started_at_ms changed after launching")
        if prev.has_callback_pair and (
            (new.callback_sequence, new.callback_token_sha256)
            != (prev.callback_sequence, prev.callback_token_sha256)
        ):
            bad("INBOX-03: the callback pair changed after launching")

    def _check_completion_order(self, offer_id: str) -> None:
        """INBOX-34: `completion_acknowledged` only after this process's own submission was
        answered `completed` / `already_terminal`."""
        ok = any(
            c.port == "control.complete"
            and c.offer_id == offer_id
            and c.incarnation == self.incarnation
            and c.delivered
            and c.code in _COMPLETION_ACCEPTED
            for c in self.calls
        )
        if not ok:
            self.violations.append(
                f"INBOX-34: completion_acknowledged for {offer_id[:12]} before an accepted "
                "submission of this process"
            )

    def in_doubt_check(self) -> None:
        """Writes that did not return (a crash inside, an I/O error): whatever the disk shows
        now decides whether they became durable (INBOX-15: all or nothing)."""
        disk = self._read_disk()
        if disk is None:
            return
        for offer_id in sorted(set(disk) | set(self.history)):
            on_disk = disk.get(offer_id)
            known = self._current(offer_id)
            if on_disk == known:
                continue
            match = [
                (port, record)
                for port, oid, record in self.in_doubt
                if oid == offer_id and record == on_disk
            ]
            if match:
                self.durable_write(match[-1][0], offer_id, match[-1][1])
            else:
                self.violations.append(
                    f"INBOX-15/I-J3: the durable record of {offer_id[:12]} is neither the last "
                    f"durable write nor a write in doubt (disk {_rev(on_disk)}, model "
                    f"{_rev(known)})"
                )
                self.history.setdefault(offer_id, []).append(on_disk)
        self.in_doubt.clear()
        self.disk = disk

    def _read_disk(self) -> dict[str, JournalRecord] | None:
        """Every record through the live adapter (not through the crash switch)."""
        out: dict[str, JournalRecord] = {}
        cursor: str | None = None
        try:
            while True:
                page = self.w.inner.list(cursor, 64)
                for record in page.records:
                    out[record.offer_id] = record
                if not page.has_more:
                    return out
                cursor = page.cursor
        except JournalError as exc:
            self.violations.append(f"INBOX-15/F-9: the journal cannot be listed: {exc.code}")
            return None

    def _journal_bytes(self) -> Iterator[bytes]:
        assert self._root is not None
        for path in sorted(self._root.rglob("*")):
            if path.is_file():
                with contextlib.suppress(OSError):
                    yield path.read_bytes()

    # -- steps ----------------------------------------------------------------------------------
    def _begin(self) -> None:
        self.counts.steps += 1
        self._fired_before = len(self.switch.fired)
        self.step_start_state = {oid: r.state for oid, r in self.disk.items()}
        self._observed_at = self.clock()

    def _step(self, name: str, args: Mapping[str, object], body: Callable[[], object]) -> object:
        """Run one rule body; a crash ends it and the Worker restarts."""
        self._begin()
        try:
            result = body()
        except Crash:
            result = "crashed"
        if result is not None and result != "crashed":
            self.reprs.append(repr(result))
        self._finish(name, args, result)
        return result

    def _finish(self, name: str, args: Mapping[str, object], result: object) -> None:
        """After a step: settle the writes in doubt against the disk, record the trace line,
        and restart a dead Worker (its own trace line, fault `reopen`)."""
        self.in_doubt_check()
        self._line(name, args, result)
        if self.switch.dead:
            before = dict(self.disk)
            self._restart()
            self.in_doubt_check()
            if self.disk != before:
                self.violations.append("INBOX-15: the journal changed across the restart")
            after = "kill" if name == "kill" else "crash"
            self._line("restart", {"after": after}, "reopened", reopen=True)

    def _line(
        self, name: str, args: Mapping[str, object], result: object, *, reopen: bool = False
    ) -> None:
        fault: dict[str, object] | None = None
        fired = self.switch.fired[self._fired_before :]
        if reopen:
            fault = {"kind": "reopen"}
        elif fired:
            fault = fired[0].as_json()
            if len(fired) > 1:  # several armed faults fired in this step, in order
                fault["more"] = [f.as_json() for f in fired[1:]]
        step: dict[str, object] = {
            "step": self._step_index,
            "command": {"name": name, "args": dict(args)},
            "observed_at_ms": getattr(self, "_observed_at", self.clock()),
        }
        if fault is not None:
            step["fault"] = fault
        step["expect"] = self._expect(result)
        self.lines.append(step)
        self._step_index += 1
        self._fired_before = len(self.switch.fired)
        kind, code = _outcome(result)
        WORKER_STATS.outcomes[f"{name} {kind} {code}"] += 1

    def _expect(self, result: object) -> dict[str, object]:
        kind, code = _outcome(result)
        journal = {
            oid: {
                "state": r.state.value,
                "revision": r.revision,
                "recovery_reason": None if r.recovery_reason is None else r.recovery_reason.value,
            }
            for oid, r in sorted(self.disk.items())
        }
        attempts: dict[str, str] = {}
        for state in self.runs:
            agg = self._aggregate(state.attempt_id)
            attempt = None if agg is None else agg.attempt(state.attempt_id)
            if attempt is not None:
                attempts[state.attempt_id] = attempt.status.value
        return {
            "outcome": None if kind is None else {"kind": kind, "code": code},
            "journal": journal,
            "executor_calls": dict(sorted(self.start_calls.items())),
            "attempts": attempts,
            "receipts": sorted(self.receipts.files),
        }

    # -- rules ------------------------------------------------------------------------------
    @rule(
        run=st.sampled_from(RUN_PICKS),
        version=st.sampled_from(VERSIONS),
        kind=st.sampled_from(KINDS),
        fault=st.none() | FAULT_SPECS,
    )
    def deliver(
        self, run: int, version: str, kind: DeliveryKind, fault: FaultSpec | None = None
    ) -> None:
        """One delivery of an offer (the first one is a new claim; later ones redeliveries),
        optionally with a fault armed just before it."""
        state = self._pick(run)
        offer = self._offer(state, version, kind)
        state.last = offer
        args = _offer_args(offer, version)
        if fault is not None:
            args["fault_armed"] = self._arm(fault)
        before = self.disk.get(offer.offer_id)
        fired = len(self.switch.fired)
        result = self._step("deliver", args, lambda: self.w.receiver.deliver(offer))
        if before is not None and len(self.switch.fired) == fired:
            self._check_redelivery(before, offer, result)

    def _check_redelivery(self, before: JournalRecord, offer: Offer, result: object) -> None:
        """INBOX-07: `running_acknowledged` answers a redelivery with an idempotent success;
        INBOX-10: in a state that only replays, an equal or lower lease version writes
        nothing and a higher one replaces only the lease (final states: nothing at all)."""
        if not isinstance(result, DeliveryResult) or result.kind is ResultKind.REJECTED:
            return
        after = self.disk.get(offer.offer_id)
        if before.state is JournalState.RUNNING_ACKNOWLEDGED:
            require(
                result.kind is ResultKind.REPLAYED
                and result.state is JournalState.RUNNING_ACKNOWLEDGED,
                "INBOX-07",
                f"a redelivery of a running_acknowledged offer answered {result.kind} "
                f"{result.state}",
            )
        if before.state not in _REPLAY_ONLY:
            return
        if before.state in S_FINAL or offer.lease.version <= before.offer.lease.version:
            require(
                after == before,
                "INBOX-10",
                f"a redelivery (version {offer.lease.version}) changed a {before.state} record "
                f"at version {before.offer.lease.version}",
            )
        else:
            require(
                after is not None
                and after.state is before.state
                and after.revision == before.revision + 1
                and after.offer.lease == offer.lease,
                "INBOX-10",
                "a higher lease version must replace only the stored lease (revision + 1)",
            )

    @rule(run=st.sampled_from(RUN_PICKS))
    def redeliver(self, run: int) -> None:
        """The control plane's `lease_recovery` redelivery with the current lease (what the
        transport sends a restarted Worker; the only way a renewed version reaches the
        journal, §3.12 decision)."""
        self.deliver(run, "current", DeliveryKind.LEASE_RECOVERY, None)

    @rule(behaviour=st.sampled_from(BEHAVIOURS), fault=st.none() | FAULT_SPECS)
    def deliver_new(self, behaviour: str, fault: FaultSpec | None = None) -> None:
        """The control plane admits another Run, grants it to the Worker and delivers its
        first offer, optionally with a fault armed (at most `MAX_LIVE_RUNS` unfinished Runs at
        a time and `MAX_RUNS` per machine run; otherwise the newest Run's current offer)."""
        live = [r for r in self.runs if not self._attempt_final(r)]
        online = self.sessions[WORKER_ID].status is WorkerSessionStatus.ONLINE
        if online and len(live) < self.MAX_LIVE_RUNS and len(self.runs) < self.MAX_RUNS:
            self._admit(len(self.runs), behaviour)
        self.deliver(len(self.runs[-3:]) - 1, "current", DeliveryKind.NEW_CLAIM, fault)

    def _attempt_final(self, state: RunState) -> bool:
        agg = self._aggregate(state.attempt_id)
        attempt = None if agg is None else agg.attempt(state.attempt_id)
        return attempt is None or attempt.status in FINAL_ATTEMPT_STATUSES

    @rule(
        run=st.sampled_from(RUN_PICKS),
        threads=st.sampled_from(THREADS),
        kind=st.sampled_from(KINDS),
    )
    def deliver_concurrently(self, run: int, threads: int, kind: DeliveryKind) -> None:
        """2-4 threads deliver the same offer at once (ADR-0021 §1: they join one operation)."""
        state = self._pick(run)
        offer = self._offer(state, "current", kind)
        state.last = offer
        if not self.CONCURRENCY:
            self._step("deliver", _offer_args(offer, "current"), lambda: self._deliver(offer))
            return
        args = {**_offer_args(offer, "current"), "threads": threads}
        self._step("deliver_concurrently", args, lambda: self._concurrently(offer, threads))

    def _deliver(self, offer: Offer) -> object:
        return self.w.receiver.deliver(offer)

    def _concurrently(self, offer: Offer, threads: int) -> object:
        """The same offer from `threads` threads at once; every other thread's copy says the
        other delivery kind (an equal offer joins the one in flight; a different one of the
        same offer id waits for it and then takes its own pass)."""
        other = _with_kind(
            offer,
            DeliveryKind.LEASE_RECOVERY
            if offer.delivery_kind is DeliveryKind.NEW_CLAIM
            else DeliveryKind.NEW_CLAIM,
        )
        receiver = self.w.receiver
        bodies: list[Callable[[], object]] = [
            functools.partial(receiver.deliver, offer if i % 2 == 0 else other)
            for i in range(threads)
        ]
        return self._parallel(bodies)

    def _parallel(self, bodies: Sequence[Callable[[], object]]) -> object:
        """Run the bodies on threads released together; a crash in any is the process's."""
        WORKER_STATS.concurrent_steps += 1
        barrier = threading.Barrier(len(bodies))
        results: list[object] = []
        errors: list[BaseException] = []
        crashed: list[bool] = []

        def run(body: Callable[[], object]) -> None:
            try:
                barrier.wait(5)
                results.append(body())
            except Crash:
                crashed.append(True)
            except BaseException as exc:  # a real bug: re-raised in the machine's thread
                errors.append(exc)

        pool = [threading.Thread(target=run, args=(body,), daemon=True) for body in bodies]
        self.concurrent = True
        try:
            for thread in pool:
                thread.start()
            for thread in pool:
                thread.join(30)
        finally:
            self.concurrent = False
        require(not any(t.is_alive() for t in pool), "ADR-0021 §1", "a concurrent call hung")
        if errors:
            raise errors[0]
        if crashed:
            raise Crash("concurrent")
        return results[0] if results else None

    @rule(run=st.sampled_from(RUN_PICKS), kind=st.sampled_from(KINDS))
    def deliver_during_tick(self, run: int, kind: DeliveryKind) -> None:
        """A delivery while the lease lifecycle's timer thread renews (§3.15: one timer of its
        own): the running ACK and the renewal race for the lease version (§3.5 ACK retry)."""
        state = self._pick(run)
        offer = self._offer(state, "current", kind)
        state.last = offer
        w = self.w
        args = _offer_args(offer, "current")
        if not self.CONCURRENCY:
            self._step("deliver", args, lambda: self._deliver(offer))
            return
        bodies: list[Callable[[], object]] = [
            functools.partial(w.receiver.deliver, offer),
            functools.partial(w.lifecycle.tick, self.clock()),
        ]
        self._step("deliver_during_tick", args, lambda: self._parallel(bodies))

    @rule(
        countdown=st.sampled_from(COUNTDOWNS),
        kind=st.sampled_from(FAULT_KINDS),
        port=st.sampled_from(FAULT_PORTS),
        at=st.sampled_from(INSIDE_AT),
    )
    def arm_fault(self, countdown: int, kind: FaultKind, port: str | None, at: int) -> None:
        """Arm one fault at the k-th next call of a port it applies to."""
        args = self._arm((countdown, kind, port, at))
        self._step("arm_fault", args, lambda: None)

    def _arm(self, spec: FaultSpec) -> dict[str, object]:
        """For a named port k is 1..3 (most ports are called a few times per offer, `start()`
        at most once); for "any port" k runs over a whole delivery's calls. A kind that does
        not apply to the named port becomes one that does. Returns the trace arguments."""
        countdown, kind, port, at = spec
        if kind not in self.FAULT_KINDS:
            kind = self.FAULT_KINDS[countdown % len(self.FAULT_KINDS)]
        if port not in self.FAULT_PORTS:
            port = self.FAULT_PORTS[countdown % len(self.FAULT_PORTS)]
        if port is not None:
            countdown = 1 + (countdown - 1) % 3
            if port not in APPLIES[kind]:
                fits = [k for k in self.FAULT_KINDS if port in APPLIES[k]]
                if fits:
                    kind = fits[countdown % len(fits)]
                else:
                    port = None
        self.switch.arm(Armed(countdown, kind, port, at))
        return {"countdown": countdown, "kind": kind.value, "port": port, "at": at}

    @rule()
    def restart(self) -> None:
        """The Worker process is killed between steps and started again."""
        self._begin()
        self.switch.dead = True
        self._finish("kill", {}, None)

    @rule()
    def poll_completions(self) -> None:
        """`WorkerRuntime.poll_completions` (one page): the supervisor's `reconcile_one` for
        every record that may own local execution and has no delivery in flight, in a live
        process whose lease lifecycle is tracking (§3.11, §3.12)."""

        def poll() -> object:
            w = self.w
            return poll_page(
                w.journal, w.receiver, w.lifecycle, w.supervisor, now_ms=self.clock(), limit=16
            )

        self._step("poll_completions", {}, poll)

    @rule()
    def startup_recovery(self) -> None:
        """What `WorkerRuntime.start()` does after acquiring (§3.10, §3.13, §3.7): the startup
        audit, the recovery supervisor over it, then `fail_start` replays for its
        `start_failed` entries."""
        self._step("startup_recovery", {}, self._recover)

    def _recover(self) -> object:
        w = self.w
        budget = Paging(16, 4)  # U-2 edge: 16 x 4 covers the capacity 64
        audit = StartupAuditor(w.journal, budget).audit()
        if isinstance(audit, AuditRefused):
            return audit
        result = w.supervisor.run(audit, self.clock())
        self.reprs.extend(repr(r) for r in replay_start_failures(audit, w.receiver))
        return result

    @rule(run=st.sampled_from(RUN_PICKS), exit_code=st.sampled_from(EXIT_CODES))
    def child_finishes(self, run: int, exit_code: int) -> None:
        """The child process of a started Attempt exits and publishes its receipt: the
        callback sequence, token and start time of the context it was launched with."""
        state = self._pick(run)

        def finish() -> object:
            child = self.children.get(state.offer_id)
            if child is None or not child.alive:
                return None
            child.alive = False
            ctx = child.context
            outcome = CompletionOutcome.SUCCEEDED if exit_code == 0 else CompletionOutcome.FAILED
            self.receipts.publish(
                Receipt(
                    run_id=ctx.run_id,
                    attempt_id=ctx.attempt_id,
                    executor_started_at_ms=ctx.executor_started_at_ms,
                    callback_sequence=ctx.callback_sequence,
                    outcome=outcome,
                    exit_code=exit_code,
                    finished_at_ms=self.clock(),
                    callback_token=ctx.callback_token,
                )
            )
            return "published"

        args = {"attempt_id": state.attempt_id, "exit_code": exit_code}
        self._step("child_finishes", args, finish)

    @rule(ms=st.sampled_from(ADVANCES))
    def advance_clock(self, ms: int) -> None:
        def advance() -> object:
            self.clock.advance(ms)
            return None

        self._step("advance_clock", {"ms": ms}, advance)

    @rule()
    def tick(self) -> None:
        """The lease lifecycle's timer body: renew due leases, report lost ones (§3.15)."""
        self._step("tick", {}, lambda: self.w.lifecycle.tick(self.clock()))

    @rule()
    def expire_leases(self) -> None:
        """The control plane's expiry scanner, one page (§3.16)."""

        def scan() -> object:
            return lease_expiry_page(
                self.store, self.store, self.clock(), 16, None, profile=Profile.EDGE
            )

        self._step("expire_leases", {}, scan)

    @rule(status=st.sampled_from(SESSIONS))
    def set_session(self, status: WorkerSessionStatus) -> None:
        """The Worker session's status on the control plane and in the bound runtime."""

        def change() -> object:
            self.sessions[WORKER_ID] = _session(status)
            return None

        self._step("set_session", {"status": status.value}, change)

    @rule()
    def retention(self) -> None:
        """One page of terminal retention (§3.14; the caller keeps the cursor)."""

        def run() -> object:
            retention = TerminalRetention(self.w.journal, self.receipts, RETENTION_MS)
            result = retention.run(self.retention_cursor, self.clock())
            self.retention_cursor = result.cursor
            return result

        self._step("retention", {"cursor_set": self.retention_cursor is not None}, run)

    # -- invariants ----------------------------------------------------------------------------
    def _checked(self) -> bool:
        self.counts.invariant_checks += 1
        return self.ready

    @invariant()
    def start_at_most_once(self) -> None:
        """INBOX-04 / I-J1: `Executor.start()` at most once per offer id over the whole run,
        across every crash, restart and duplicate; then every check the ports recorded at the
        call (I-J2, INBOX-03, INBOX-05/06, INBOX-08, INBOX-34, CAD-15, INBOX-39/41, I-J3, I-J4,
        INBOX-01/02, INBOX-15, I-J6, §3.15), in the order they happened."""
        if not self._checked():
            return
        for offer_id, n in sorted(self.start_calls.items()):
            require(
                n <= 1,
                "INBOX-04",
                f"I-J1: Executor.start() called {n} times for offer {offer_id[:12]}",
            )
        if self.violations:
            raise ModelViolation(self.violations[0])

    @invariant()
    def disk_is_the_last_durable_write(self) -> None:
        """INBOX-02 / INBOX-15 / I-J4: what is durable after the step is the last durable
        write of each offer, and it satisfies §3.3."""
        if not self._checked():
            return
        for offer_id in sorted(set(self.disk) | set(self.history)):
            on_disk, known = self.disk.get(offer_id), self._current(offer_id)
            require(
                on_disk == known,
                "INBOX-15",
                f"{offer_id[:12]}: disk {_rev(on_disk)}, last durable write {_rev(known)}",
            )
            if on_disk is not None:
                found = record_violations(on_disk)
                require(not found, "I-J4", f"{offer_id[:12]} breaks §3.3: {found}")

    @invariant()
    def no_raw_callback_token_in_the_journal(self) -> None:
        """INBOX-03 / I-J5: no journal byte sequence contains a raw callback token (only its
        SHA-256 is stored)."""
        if not self._checked() or not self.callback_tokens:
            return
        tokens = [t.encode() for t in self.callback_tokens]
        for data in self._journal_bytes():
            for token in tokens:
                require(token not in data, "INBOX-03", "a raw callback token is on disk")

    @invariant()
    def control_plane_only_what_the_worker_caused(self) -> None:
        """§3.1 / INBOX-34 / INBOX-08: a `running` Attempt has a process this Worker started
        and acknowledged; a completed lease has a published receipt with the same sequence,
        outcome and exit code (no fake completion); a start failure was reported by the Worker
        for an offer whose process never existed."""
        if not self._checked():
            return
        for state in self.runs:
            agg = self._aggregate(state.attempt_id)
            attempt = None if agg is None else agg.attempt(state.attempt_id)
            if agg is None or attempt is None:
                continue
            oid = state.offer_id
            if attempt.status is AttemptStatus.RUNNING:
                require(
                    oid in self.children and self._called("control.acknowledge_running", oid),
                    "§3.1",
                    f"{state.attempt_id} is running on the control plane without this "
                    "Worker's process and running ACK",
                )
            for row in agg.leases_of(state.attempt_id):
                if row.status is LeaseStatus.COMPLETED:
                    receipt = self.receipts.published.get(state.attempt_id)
                    require(
                        receipt is not None
                        and receipt.callback_sequence == attempt.callback_sequence
                        and receipt.exit_code == attempt.exit_code
                        and receipt.outcome.value == attempt.status.value,
                        "INBOX-34",
                        f"{state.attempt_id} completed on the control plane without a "
                        "matching receipt (fake completion)",
                    )
                if row.release_reason is ReleaseReason.START_FAILED:
                    require(
                        self._called("control.fail_start", oid) and oid not in self.children,
                        "INBOX-08",
                        f"{state.attempt_id} failed to start on the control plane, but the "
                        "Worker did not report it or its process exists",
                    )

    @invariant()
    def results_never_show_a_token(self) -> None:
        """S-1 / INBOX-38 / INBOX-44: no delivery, supervisor, coordinator, lease-loss or
        retention result repr contains a lease or callback token."""
        if not self._checked() or not self.reprs:
            return
        secrets_ = [*self.callback_tokens, *(s.token.reveal() for s in self.runs)]
        for text in self.reprs:
            for token in secrets_:
                require(token not in text, "INBOX-38", "a result repr shows a token")
        self.reprs.clear()

    def _called(self, port: str, offer_id: str) -> bool:
        return any(c.port == port and c.offer_id == offer_id for c in self.calls)

    INVARIANTS: ClassVar[tuple[str, ...]] = (
        "start_at_most_once",
        "disk_is_the_last_durable_write",
        "no_raw_callback_token_in_the_journal",
        "control_plane_only_what_the_worker_caused",
        "results_never_show_a_token",
    )

    def check_all(self) -> None:
        for name in self.INVARIANTS:
            getattr(self, name)()

    # -- traces -------------------------------------------------------------------------------
    def trace_header(self) -> dict[str, object]:
        capabilities = sorted({"faults", "worker_runtime", f"journal_{self.ADAPTER}"})
        return {
            "trace_version": TRACE_VERSION,
            "name": f"INBOX-04-worker-{self.ADAPTER}-{self.seed}-{self.serial:05d}",
            "component": "journal",
            "profile": Profile.WORKER.value,
            "seed": self.seed,
            "kernel_version": kernel.__version__,
            "description": (
                f"{type(self).__name__} run (model_tests.worker_machine): receiver and "
                f"recovery on the {self.ADAPTER} journal with crashes at every port call"
            ),
            "capabilities": capabilities,
        }

    def trace_lines(self) -> list[str]:
        lines = [self.trace_header(), *self.lines]
        return [json.dumps(line, sort_keys=True, separators=(",", ":")) for line in lines]

    def secrets_used(self) -> list[str]:
        """Every raw token this run used (for the "no token in a trace" check)."""
        return [*self.callback_tokens, *(s.token.reveal() for s in self.runs)]

    def _write_trace(self) -> None:
        directory = self.TRACE_DIR or os.environ.get(TRACE_DIR_ENV)
        if not directory:
            return
        target = Path(directory)
        target.mkdir(parents=True, exist_ok=True)
        name = self.trace_header()["name"]
        path = target / f"{name}.jsonl"
        path.write_text("\n".join(self.trace_lines()) + "\n", encoding="utf-8")
        WORKER_STATS.traces_written += 1

    # -- the seeded driver --------------------------------------------------------------------
    DRIVER: ClassVar[tuple[tuple[str, Mapping[str, Domain], int], ...]] = (
        (
            "deliver",
            {"run": RUN_PICKS, "version": VERSIONS, "kind": KINDS, "fault": _draw_fault},
            6,
        ),
        ("deliver_new", {"behaviour": BEHAVIOURS, "fault": _draw_fault}, 2),
        ("redeliver", {"run": RUN_PICKS}, 2),
        ("deliver_concurrently", {"run": RUN_PICKS, "threads": THREADS, "kind": KINDS}, 1),
        ("deliver_during_tick", {"run": RUN_PICKS, "kind": KINDS}, 1),
        ("poll_completions", {}, 2),
        (
            "arm_fault",
            {"countdown": COUNTDOWNS, "kind": FAULT_KINDS, "port": FAULT_PORTS, "at": INSIDE_AT},
            3,
        ),
        ("restart", {}, 1),
        ("startup_recovery", {}, 3),
        ("child_finishes", {"run": RUN_PICKS, "exit_code": EXIT_CODES}, 3),
        ("advance_clock", {"ms": ADVANCES}, 3),
        ("tick", {}, 3),
        ("expire_leases", {}, 1),
        ("set_session", {"status": SESSIONS}, 1),
        ("retention", {}, 1),
    )

    def start_driver(self, rng: random.Random) -> None:
        self.setup(rng.randint(1, 3), [rng.choice(BEHAVIOURS) for _ in range(3)])

    def random_step(self, rng: random.Random) -> None:
        name, params, _ = rng.choices(self.DRIVER, weights=[r[2] for r in self.DRIVER])[0]
        kwargs = {
            key: domain(rng) if callable(domain) else rng.choice(domain)
            for key, domain in params.items()
        }
        getattr(self, name)(**kwargs)
        self.check_all()


def drive(machine: WorkerMachine, rng: random.Random, steps: int) -> WorkerMachine:
    """`steps` rule steps with the seeded driver, every invariant after each, then teardown."""
    try:
        machine.start_driver(rng)
        machine.check_all()
        for _ in range(steps):
            machine.random_step(rng)
    finally:
        machine.teardown()
    return machine


# -- helpers ------------------------------------------------------------------------------------
def _session(status: WorkerSessionStatus = WorkerSessionStatus.ONLINE) -> WorkerSession:
    return WorkerSession(
        worker_id=WORKER_ID,
        session_id=SESSION_ID,
        generation=1,
        status=status,
        session_expires_at_ms=T0 + 30 * 24 * 3_600_000,
        executor_types=("shell",),
    )


def _with_kind(offer: Offer, kind: DeliveryKind) -> Offer:
    return offer if offer.delivery_kind is kind else dataclasses.replace(offer, delivery_kind=kind)


def _offer_args(offer: Offer, version: str) -> dict[str, object]:
    """Ids and versions only (never the lease token)."""
    return {
        "offer_id": offer.offer_id,
        "attempt_id": offer.lease.attempt_id,
        "lease_generation": offer.lease.lease_generation,
        "lease_version": offer.lease.version,
        "delivery_kind": offer.delivery_kind.value,
        "which": version,
    }


def _outcome(result: object) -> tuple[str | None, str | None]:
    if result is None:
        return None, None
    if isinstance(result, str):
        return result, None
    kind = getattr(result, "kind", None)
    code = getattr(result, "code", None)
    if kind is not None:
        return str(getattr(kind, "value", kind)), None if code is None else str(code)
    status = getattr(result, "status", None)
    if status is not None:
        return "status", str(status)
    return type(result).__name__, None if code is None else str(code)


def _rev(record: JournalRecord | None) -> str:
    return "absent" if record is None else f"r{record.revision} {record.state}"


def _no_sleep(seconds: float) -> None:
    del seconds


# -- a quick long run -----------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--steps", type=int, default=5_000)
    parser.add_argument("--episode-steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--adapter", choices=ADAPTERS, default="file")
    parser.add_argument("--trace-dir", default=None, help="keep every episode's trace here")
    args = parser.parse_args(argv)
    machine_cls = WorkerMachine.configured(ADAPTER=args.adapter, TRACE_DIR=args.trace_dir)
    started = time.perf_counter()
    done = episode = 0
    while done < args.steps:
        seed = args.seed * 1_000_003 + episode
        machine = machine_cls(seed=seed)
        try:
            drive(machine, random.Random(seed), args.episode_steps)
        except ModelViolation as exc:
            print(f"episode seed {seed}: {exc}", file=sys.stderr)
            return 1
        done += args.episode_steps
        episode += 1
    elapsed = time.perf_counter() - started
    print(
        f"{done} steps in {episode} episodes ({args.adapter}) in {elapsed:.1f} s; "
        f"faults {WORKER_STATS.by_kind()}; restarts {WORKER_STATS.restarts}; "
        f"completions {WORKER_STATS.completions}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
