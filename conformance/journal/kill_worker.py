"""A real Worker process for the kill matrix (issue 6 item 7; SPEC §3.5, §3.7, §3.10-§3.13,
§3.17 I-J1): `python -m conformance.journal.kill_worker --control DB --journal file|sqlite ...`.

One process is one `WorkerRuntime` (`runners.worker.runtime`, the assembled Worker a deployment
embeds) of the fixed session `session()`: the harness grants its leases to that session, and a
restarted process is the same Worker session. The process

1. opens the control plane (`EngineControlPlane` on the `EdgeStore` file the harness shares; the
   store's `BEGIN IMMEDIATE` serialises the two processes), the journal adapter on its root, the
   receipts directory and the executor's spawn journal
   (`runners.worker.posix.adapters.SpawnJournal`,
   one fsynced line per `Executor.start()` call, written before the wrapper is spawned);
2. starts the runtime (§3.10: acquire, audit, the startup supervisor of §3.13 as recovery,
   re-audit, hold), retrying `JOURNAL_LOCKED` with a new runtime until the stale window of a
   SIGKILLed owner has passed, then starts the lease timer and reports `ready`;
3. reads the harness's commands from **stdin**, one per line: `deliver <record JSON>` (the offer
   inside an `accepted` revision-0 record in the journal's own strict codec: the lease token
   travels only through the pipe, never argv or the environment, and is never logged) and
   `stop`; each offer goes to `WorkerRuntime.deliver` (§3.5);
4. between deliveries, on the same thread, runs `WorkerRuntime.poll_completions` over the whole
   journal (Reconciler then Coordinator for every record that may own a local execution,
   §3.11, §3.12);
5. on `stop` (or end of input) stops the runtime (lease timer, journal release) and exits 0.

`--kill-point PHASE:TARGET[#N]` makes the process SIGKILL **itself** at one precise boundary
(no cleanup, no `finally`; only the pipe line announcing it is written first):

- `before:<state>` / `after:<state>`: around the N-th durable journal write (create or replace)
  whose new state is `<state>` (every §3.4 state);
- `before:lease_merged` / `after:lease_merged`: around the N-th write that only raised the
  stored lease version (a redelivery's merge, C-1);
- `after:spawn_logged`: the executor's spawn line is durable, the launch wrapper not spawned;
- `after:executor_start`: `Executor.start()` returned a handle (the child runs), `started` is
  not written yet;
- `after:complete`: the control plane committed the completion (T6), `completion_acknowledged`
  is not written yet.

`--sabotage forget-launching|blind-receipts` breaks this Worker on purpose, only so that the
matrix can show its checks have teeth: `forget-launching` presents a `launching` record as
`starting_acknowledged` (so a restart starts it again), `blind-receipts` never sees a receipt.

Stdout carries one JSON object per line for the harness: ids, states, codes and counts only
(S-1: never a token, command line or ExecutionSpec).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from kernel import WorkerSession
from kernel.specs import Code, InboxState, JournalState, WorkerSessionStatus
from kernel.worker import (
    AuthorityFacts,
    CompletionSubmission,
    JournalCorrupt,
    JournalRecord,
    Offer,
    OfferLease,
    decode_record,
    encode_record,
)
from runners.edge.store import EdgeStore
from runners.worker.control_plane import EngineControlPlane
from runners.worker.coordinator import CoordinatorResult
from runners.worker.journal.file import FileJournal
from runners.worker.journal.lock import JournalOwnership
from runners.worker.journal.port import JournalError, JournalPage
from runners.worker.journal.sqlite import SqliteJournal
from runners.worker.ports import ExecutionContext, LeaseAck
from runners.worker.posix.adapters import PosixExecutorPort, SpawnJournal
from runners.worker.posix.executor import PosixExecutor
from runners.worker.posix.receipts import CompletionReceiptStore, Receipt
from runners.worker.receiver import DeliveryResult
from runners.worker.runtime import WorkerRuntime

__all__ = [
    "GENERATION",
    "KILL_TARGETS",
    "SESSION_ID",
    "WORKER_ID",
    "KillPoint",
    "decode_delivery",
    "encode_delivery",
    "main",
    "session",
]

WORKER_ID: Final = "kill-worker"
SESSION_ID: Final = "kill-worker-s1"
GENERATION: Final = 1
#: The session lease of the matrix's Worker: far in the future (2100-01-01), so that only Run
#: leases expire during a case.
SESSION_EXPIRES_AT_MS: Final = 4_102_444_800_000
EXECUTOR_TYPE: Final = "shell"


#: Every boundary `--kill-point` can name: (phase, target).
KILL_TARGETS: Final[frozenset[tuple[str, str]]] = frozenset(
    {(phase, state.value) for phase in ("before", "after") for state in JournalState}
    | {
        ("before", "lease_merged"),
        ("after", "lease_merged"),
        ("after", "spawn_logged"),
        ("after", "executor_start"),
        ("after", "complete"),
    }
)
LEASE_MERGED: Final = "lease_merged"


def session() -> WorkerSession:
    """The one Worker session of the matrix (the control plane's view and the runtime's own)."""
    return WorkerSession(
        worker_id=WORKER_ID,
        session_id=SESSION_ID,
        generation=GENERATION,
        status=WorkerSessionStatus.ONLINE,
        session_expires_at_ms=SESSION_EXPIRES_AT_MS,
        executor_types=(EXECUTOR_TYPE,),
    )


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


# -- the delivery pipe ----------------------------------------------------------------------------
def encode_delivery(offer: Offer) -> bytes:
    """One `deliver` line: the offer inside an `accepted` revision-0 record, in the journal's
    strict codec (the bytes carry the lease token: they go through the pipe only)."""
    carrier = JournalRecord(
        revision=0, state=JournalState.ACCEPTED, offer=offer, accepted_at_ms=0, updated_at_ms=0
    )
    return b"deliver " + encode_record(carrier) + b"\n"


def decode_delivery(data: bytes) -> Offer:
    """The offer of a `deliver` line's payload; `JournalCorrupt` when it is not one."""
    return decode_record(data).offer


# -- kill points ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class KillPoint:
    """`phase:target[#nth]` (module docstring)."""

    phase: str
    target: str
    nth: int = 1

    @property
    def text(self) -> str:
        suffix = "" if self.nth == 1 else f"#{self.nth}"
        return f"{self.phase}:{self.target}{suffix}"

    @classmethod
    def parse(cls, text: str) -> KillPoint:
        body, _, nth = text.partition("#")
        phase, _, target = body.partition(":")
        if (phase, target) not in KILL_TARGETS:
            raise ValueError(f"unknown kill point {body!r}")
        count = int(nth) if nth else 1
        if count < 1:
            raise ValueError("kill point ordinal must be >= 1")
        return cls(phase, target, count)


class Emitter:
    """Thread-safe JSON lines on the harness pipe (ids, states, codes, counts only)."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields: object) -> None:
        line = json.dumps({"event": event, **fields}, sort_keys=True, default=str)
        with self._lock:
            self._stream.write(line + "\n")
            self._stream.flush()


class Killer:
    """SIGKILLs this process at the armed boundary (module docstring)."""

    def __init__(self, point: KillPoint | None, emit: Emitter) -> None:
        self._point = point
        self._emit = emit
        self._count = 0
        self._lock = threading.Lock()

    def armed_for(self, target: str) -> bool:
        return self._point is not None and self._point.target == target

    def hit(self, phase: str, target: str) -> None:
        point = self._point
        if point is None or point.phase != phase or point.target != target:
            return
        with self._lock:
            self._count += 1
            if self._count != point.nth:
                return
            self._emit("kill", point=point.text)
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # pragma: no cover - SIGKILL is not deliverable late


class _Instruments:
    """The kill boundaries around every durable journal write, and (for the teeth test only)
    the `forget-launching` sabotage on what the journal reads; shared by both adapters."""

    def __init__(self, killer: Killer, *, forget_launching: bool) -> None:
        self.killer = killer
        self.forget_launching = forget_launching

    def target(self, record: JournalRecord, previous: Callable[[], JournalRecord | None]) -> str:
        """The boundary name of a write: its new state, or `lease_merged` for a write that only
        raised the stored lease version (read before, only when that point is armed)."""
        if self.killer.armed_for(LEASE_MERGED):
            before = previous()
            if (
                before is not None
                and before.state is record.state
                and record.offer.lease.version > before.offer.lease.version
            ):
                return LEASE_MERGED
        return record.state.value

    def seen(self, record: JournalRecord | None) -> JournalRecord | None:
        if (
            record is None
            or not self.forget_launching
            or record.state is not JournalState.LAUNCHING
        ):
            return record
        return dataclasses.replace(
            record,
            state=JournalState.STARTING_ACKNOWLEDGED,
            executor_started_at_ms=None,
            log_artifact_id=None,
            callback_sequence=None,
            callback_token_sha256=None,
        )

    def page(self, page: JournalPage) -> JournalPage:
        if not self.forget_launching:
            return page
        records = tuple(r for r in (self.seen(r) for r in page.records) if r is not None)
        return JournalPage(records, page.cursor, page.has_more)


class KillingJournal:
    """Either journal adapter with the kill boundaries (`_Instruments`) around its writes."""

    def __init__(self, inner: FileJournal | SqliteJournal, tools: _Instruments) -> None:
        self._inner = inner
        self._tools = tools

    @property
    def capacity(self) -> int:
        return self._inner.capacity

    def acquire(self) -> None:
        self._inner.acquire()

    def release(self) -> None:
        self._inner.release()

    def create(self, record: JournalRecord) -> None:
        target = record.state.value
        self._tools.killer.hit("before", target)
        self._inner.create(record)
        self._tools.killer.hit("after", target)

    def replace(self, record: JournalRecord, expected_revision: int) -> None:
        target = self._tools.target(record, lambda: self._inner.read(record.offer_id))
        self._tools.killer.hit("before", target)
        self._inner.replace(record, expected_revision)
        self._tools.killer.hit("after", target)

    def remove(self, offer_id: str, expected_revision: int) -> None:
        self._inner.remove(offer_id, expected_revision)

    def read(self, offer_id: str) -> JournalRecord | None:
        return self._tools.seen(self._inner.read(offer_id))

    def list(self, after: str | None, limit: int) -> JournalPage:
        return self._tools.page(self._inner.list(after, limit))


class KillingSpawnJournal(SpawnJournal):
    """The executor's spawn journal with the `after:spawn_logged` boundary."""

    def __init__(self, directory: Path, killer: Killer) -> None:
        super().__init__(directory)
        self._killer = killer

    def append(self, offer_id: str, attempt_id: str) -> None:
        super().append(offer_id, attempt_id)
        self._killer.hit("after", "spawn_logged")


class KillingExecutor:
    """`Executor` with the `after:executor_start` boundary (the child already runs)."""

    def __init__(self, inner: PosixExecutorPort, killer: Killer) -> None:
        self._inner = inner
        self._killer = killer

    def __repr__(self) -> str:
        return "KillingExecutor()"

    def start(self, context: ExecutionContext) -> str:
        handle = self._inner.start(context)
        self._killer.hit("after", "executor_start")
        return handle


class KillingClient:
    """`ControlPlaneClient` with the `after:complete` boundary (T6 committed)."""

    def __init__(self, inner: EngineControlPlane, killer: Killer) -> None:
        self._inner = inner
        self._killer = killer

    def __repr__(self) -> str:
        return "KillingClient()"

    def acknowledge_starting(self, lease: OfferLease) -> LeaseAck:
        return self._inner.acknowledge_starting(lease)

    def renew(self, lease: OfferLease, duration_ms: int) -> LeaseAck:
        return self._inner.renew(lease, duration_ms)

    def acknowledge_running(
        self, lease: OfferLease, executor_handle: str, started_at_ms: int
    ) -> LeaseAck:
        return self._inner.acknowledge_running(lease, executor_handle, started_at_ms)

    def fail_start(self, lease: OfferLease, failure_code: str) -> LeaseAck:
        return self._inner.fail_start(lease, failure_code)

    def complete(self, submission: CompletionSubmission) -> LeaseAck:
        answer = self._inner.complete(submission)
        self._killer.hit("after", "complete")
        return answer

    def read_authority(
        self, run_id: str, attempt_id: str, lease_generation: int
    ) -> AuthorityFacts | None:
        return self._inner.read_authority(run_id, attempt_id, lease_generation)


class BlindReceiptStore(CompletionReceiptStore):
    """The `blind-receipts` sabotage: a receipt store that never finds a receipt."""

    def read(self, attempt_id: str) -> Receipt | None:
        return None


# -- the process ----------------------------------------------------------------------------------
_STOP: Final = object()


def _read_commands(stream: TextIO, inbox: queue.Queue[object], emit: Emitter) -> None:
    for line in stream:
        command, _, payload = line.rstrip("\n").partition(" ")
        if command == "stop":
            break
        if command != "deliver":
            emit("input_refused", reason="unknown_command")
            continue
        try:
            inbox.put(decode_delivery(payload.encode("utf-8")))
        except (JournalCorrupt, ValueError):
            emit("input_refused", reason="not_an_offer")
    inbox.put(_STOP)


def _delivery_fields(result: DeliveryResult) -> dict[str, object]:
    return {
        "offer_id": result.offer_id,
        "kind": result.kind.value,
        "code": result.code.value,
        "state": None if result.state is None else result.state.value,
        "reason": None if result.recovery_reason is None else result.recovery_reason.value,
        "revision": result.revision,
    }


class KillWorker:
    """One `WorkerRuntime` (the assembled Worker of `runners.worker.runtime`) on instrumented
    ports, driven by the harness's pipe (module docstring)."""

    def __init__(self, args: argparse.Namespace, emit: Emitter) -> None:
        self.emit = emit
        point = None if args.kill_point is None else KillPoint.parse(args.kill_point)
        self.killer = Killer(point, emit)
        self.args = args
        self.clock: Callable[[], int] = wall_clock_ms
        self.store = EdgeStore(Path(args.control))
        sessions: Mapping[str, WorkerSession] = {WORKER_ID: session()}
        self.client = KillingClient(
            EngineControlPlane(
                self.store, lambda _tx, worker_id: sessions.get(worker_id), self.clock
            ),
            self.killer,
        )
        store_type = (
            BlindReceiptStore if args.sabotage == "blind-receipts" else CompletionReceiptStore
        )
        self.receipts = store_type(Path(args.receipts))
        self.receipts.ensure_directory()
        spawns = KillingSpawnJournal(Path(args.spawns), self.killer)
        port = PosixExecutorPort(PosixExecutor(CompletionReceiptStore(Path(args.receipts))), spawns)
        self.executor = KillingExecutor(port, self.killer)
        self.tools = _Instruments(self.killer, forget_launching=args.sabotage == "forget-launching")
        self.runtime: WorkerRuntime | None = None
        self._last: dict[str, tuple[str, str | None, str | None]] = {}

    def _journal(self) -> KillingJournal:
        root = Path(self.args.journal_root)
        ownership = JournalOwnership(root, stale_window_ms=self.args.stale_window_ms)
        inner: FileJournal | SqliteJournal = (
            FileJournal(root, ownership)
            if self.args.journal == "file"
            else SqliteJournal(root, ownership)
        )
        return KillingJournal(inner, self.tools)

    def _runtime(self) -> WorkerRuntime:
        return WorkerRuntime(
            self._journal(),
            self.client,
            self.executor,
            self.receipts,
            session=session,
            clock=self.clock,
            lease_duration_ms=self.args.lease_duration_ms,
        )

    # -- startup -----------------------------------------------------------------------------------
    def start(self) -> bool:
        """§3.10 through `WorkerRuntime.start()`; a dead owner's lock is waited out (a runtime
        is single-use, so every try is a new one)."""
        began = time.monotonic()
        deadline = began + self.args.acquire_timeout_s
        attempts = 0
        while True:
            attempts += 1
            runtime = self._runtime()
            status = runtime.start()
            if status.state is InboxState.HOLDING:
                break
            if status.code is Code.JOURNAL_LOCKED and time.monotonic() < deadline:
                time.sleep(0.1)
                continue
            self.emit("refused", code=None if status.code is None else str(status.code))
            return False
        self.runtime = runtime
        audit, recovery = status.audit, status.recovery
        self.emit(
            "startup",
            acquire_attempts=attempts,
            waited_ms=int((time.monotonic() - began) * 1000),
            status=None if status.code is None else str(status.code),
            audit={} if audit is None else {k.value: v for k, v in audit.counts.items() if v},
            recovery_actions=0 if recovery is None else recovery.actions,
            recovery_failed=0 if recovery is None else recovery.failed_items,
        )
        runtime.start_timer()
        self.emit("ready", pid=os.getpid())
        return True

    # -- the loop ----------------------------------------------------------------------------------
    def run(self, stdin: TextIO) -> None:
        runtime = self.runtime
        assert runtime is not None
        inbox: queue.Queue[object] = queue.Queue()
        reader = threading.Thread(
            target=_read_commands, args=(stdin, inbox, self.emit), name="kill-worker-input"
        )
        reader.daemon = True
        reader.start()
        poll_s = self.args.poll_ms / 1000
        while True:
            try:
                item: object | None = inbox.get(timeout=poll_s)
            except queue.Empty:
                item = None
            while item is not None:
                if item is _STOP:
                    return
                self.emit("delivery", **_delivery_fields(runtime.deliver(item)))
                try:
                    item = inbox.get_nowait()
                except queue.Empty:
                    item = None
            self.poll(runtime)

    def poll(self, runtime: WorkerRuntime) -> None:
        """`WorkerRuntime.poll_completions` over the whole journal (module docstring, step 4)."""
        cursor: str | None = None
        while True:
            page = runtime.poll_completions(cursor, 16)
            for result in page.results:
                self._report(result)
            if not page.has_more:
                return
            cursor = page.cursor

    def _report(self, result: CoordinatorResult) -> None:
        seen = (
            result.outcome.value,
            None if result.code is None else result.code.value,
            None if result.state is None else result.state.value,
        )
        if self._last.get(result.offer_id) == seen:
            return
        self._last[result.offer_id] = seen
        self.emit(
            "recovery", offer_id=result.offer_id, outcome=seen[0], code=seen[1], state=seen[2]
        )

    def close(self) -> None:
        if self.runtime is not None:
            status = self.runtime.stop()
            self.emit("released", state=status.state.value)
        self.store.close()


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m conformance.journal.kill_worker")
    parser.add_argument("--control", required=True, help="the control plane's EdgeStore file")
    parser.add_argument("--journal", choices=("file", "sqlite"), required=True)
    parser.add_argument("--journal-root", required=True)
    parser.add_argument("--receipts", required=True)
    parser.add_argument("--spawns", required=True)
    parser.add_argument("--kill-point", default=None)
    parser.add_argument("--lease-duration-ms", type=int, default=30_000)
    parser.add_argument("--stale-window-ms", type=int, default=5_000)
    parser.add_argument("--acquire-timeout-s", type=float, default=60.0)
    parser.add_argument("--poll-ms", type=int, default=100)
    parser.add_argument("--sabotage", choices=("forget-launching", "blind-receipts"))
    args = parser.parse_args(argv)
    if args.kill_point is not None:
        KillPoint.parse(args.kill_point)  # refuse an unknown point before anything opens
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    emit = Emitter(sys.stdout)
    worker = KillWorker(args, emit)
    try:
        if not worker.start():
            return 3
        worker.run(sys.stdin)
    except (JournalError, RuntimeError) as exc:  # the journal became unusable (e.g. compromised)
        emit("error", code=getattr(getattr(exc, "code", None), "value", "journal_unavailable"))
        return 2
    finally:
        worker.close()
    emit("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
