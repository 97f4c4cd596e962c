"""The cluster Worker host: one `WorkerRuntime` in a process, its session in the registry and its
offers read from the control-plane database (issue 17 item 3; SPEC §3, Appendix E-2, E-3, E-6,
E-8; decisions WS-1, WH-1..WH-4).

    host = WorkerHost(HostSettings(dsn, schema, JournalLocation.parse("/var/lib/ql3/w1"),
                                   executor_types=("local.posix",)))
    host.start()      # own the journal, resume or register the session, recover, hold
    ...               # one cadence: heartbeat, pull and deliver offers, completion poll, retention
    host.drain()      # SIGTERM: the session drains (no new claim, D-8); owned work finishes
    host.stop()       # the second signal, or once drained: stop, session offline, close

The state directory (0700) holds `journal/` (the file adapter, or with `sqlite:` the SQLite
adapter's `journal.sqlite3`), `receipts/`, `spawns/` and `session` (0600: the Worker id, the
session id and generation, and the X25519 private key the dispatcher seals lease tokens to). With
no production transport (Appendix C), the host connects to PostgreSQL as the runtime does and runs
the fenced Worker commands itself, reading its session inside each command's transaction (E-8: a
trusted component; fencing defends against stale Workers, not hostile ones).

Start order (E-2, WS-1): the journal lock first (a dead predecessor's lock is reclaimed at once;
a live owner refuses), then the session — resumed when the predecessor's session is saved here
and the registry still has it online, else a new one — then `WorkerRuntime.start()` (audit,
startup recovery with the E-3 control-plane view, re-audit, hold), then the lease timer and the
host cadence. What to request, when to renew, when a drain is over: `kernel.worker_host`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from hashlib import sha256
from pathlib import Path
from typing import Final, Literal

from nacl.public import PrivateKey

from kernel import (
    WORKER_HOST_CADENCE_MS,
    RegisterSession,
    Run,
    SavedSession,
    SessionApplied,
    SessionDecision,
    SessionRecord,
    WorkerSession,
    delivery_kind,
    drain_finished,
    heartbeat_due,
    retention_due,
    session_requests,
    session_view,
)
from kernel.specs import (
    LEASE_DURATION_DEFAULT_MS,
    SESSION_TTL_DEFAULT_MS,
    Code,
    InboxState,
    JournalState,
    cadence_config,
)
from kernel.worker import offer_execution_spec
from runners.cluster.clock import DatabaseClock
from runners.cluster.dispatch import pending_offers
from runners.cluster.registry import WorkerRegistry
from runners.cluster.store import ClusterStore, ClusterTransaction
from runners.cluster.tasks import ClusterTaskStore
from runners.engine import StorageTransaction
from runners.lifecycle import CadenceLifecycle, CycleContext, LifecycleIncident, StopResult
from runners.worker.control_plane import EngineControlPlane
from runners.worker.journal.file import FileJournal
from runners.worker.journal.lock import JournalOwnership, JournalOwnershipError
from runners.worker.journal.port import JournalError
from runners.worker.journal.sqlite import SqliteJournal
from runners.worker.ports import ControlPlaneClient
from runners.worker.posix.adapters import PosixExecutorPort, SpawnJournal
from runners.worker.posix.executor import PosixExecutor
from runners.worker.posix.receipts import CompletionReceiptStore
from runners.worker.receiver import DeliveryResult
from runners.worker.runtime import CompletionPoll, WorkerRuntime

__all__ = [
    "DEFAULT_CAPACITY",
    "HostCycle",
    "HostRefused",
    "HostSettings",
    "JournalLocation",
    "WorkerHost",
    "default_worker_id",
]

#: Offers this host holds at once unless told otherwise [decision WH-2]; at most the journal's
#: capacity (the registry refuses more than SESSION_CAPACITY_MAX).
DEFAULT_CAPACITY: Final = 8
#: How long a start waits for a journal lock whose owner is alive (E-2: a dead one is reclaimed
#: at once, so this only matters when another live host holds the journal).
ACQUIRE_TIMEOUT_S: Final = 5.0
SESSION_FILE: Final = "session"
_KIND = Literal["file", "sqlite"]


class HostRefused(Exception):
    """The host cannot start; `code` is stable, the message one line naming what to fix (never a
    token, key or command)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class JournalLocation:
    """`--journal DIR` (the file adapter, §3.9) or `--journal sqlite:DIR` (the SQLite adapter) —
    DIR is the Worker's state directory [decision WH-4]."""

    kind: _KIND
    directory: Path

    @classmethod
    def parse(cls, text: str) -> JournalLocation:
        kind: _KIND = "file"
        path = text
        if text.startswith("sqlite:"):
            kind, path = "sqlite", text[len("sqlite:") :]
        if not path:
            raise ValueError("--journal: a directory is required (DIR or sqlite:DIR)")
        return cls(kind, Path(path).expanduser().absolute())

    @property
    def text(self) -> str:
        return str(self.directory) if self.kind == "file" else f"sqlite:{self.directory}"


def default_worker_id(directory: Path) -> str:
    """A stable Worker id for a state directory on this host: the host name and a digest of the
    directory's path, so a restarted host is the same Worker and two directories are two."""
    digest = sha256(str(directory).encode()).hexdigest()[:12]
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in socket.gethostname())[:40]
    return f"{name or 'worker'}-{digest}"


@dataclass(frozen=True, slots=True)
class HostSettings:
    dsn: str = field(repr=False)
    schema: str
    journal: JournalLocation
    executor_types: tuple[str, ...]
    #: How long a final journal record is kept (§3.14: no default; None keeps every record,
    #: and a journal that is full refuses new offers, F-2).
    retention_ms: int | None
    worker_id: str | None = None
    capacity: int = DEFAULT_CAPACITY
    session_ttl_ms: int = SESSION_TTL_DEFAULT_MS
    lease_duration_ms: int = LEASE_DURATION_DEFAULT_MS
    cadence_ms: int = WORKER_HOST_CADENCE_MS
    pool_size: int = 3


@dataclass(slots=True)
class HostCycle:
    """What one host cycle did (ids and counts only, S-1)."""

    ordinal: int
    heartbeat: bool = False
    delivered: list[DeliveryResult] = field(default_factory=list)
    unreadable: int = 0
    completions: CompletionPoll | None = None
    #: Final records retention deleted this cycle (0 when it did not run).
    retention: int = 0


@dataclass(frozen=True, slots=True)
class _Bound:
    record: SessionRecord
    key: bytes = field(repr=False)


class WorkerHost:
    """See the module docstring. `on_cycle` receives every `HostCycle`; `report` every
    incident the cadence absorbed. `executor_env` is the children's environment (default: the
    host's). `wrap_client` wraps the control-plane client (the restart test's kill point)."""

    def __init__(
        self,
        settings: HostSettings,
        *,
        on_cycle: Callable[[HostCycle], None] | None = None,
        report: Callable[[LifecycleIncident], None] | None = None,
        executor_env: Mapping[str, str] | None = None,
        wrap_client: Callable[[ControlPlaneClient], ControlPlaneClient] | None = None,
    ) -> None:
        self.settings = settings
        self._wrap_client = wrap_client
        self.state = settings.journal.directory
        self.worker_id = settings.worker_id or default_worker_id(self.state)
        self._on_cycle = on_cycle
        self._report = report
        self._executor_env = executor_env
        self._bound: _Bound | None = None
        self._renewed_ms = 0
        self._cursor: str | None = None
        self._retention_cursor: str | None = None
        self._draining = threading.Event()
        self._guard = threading.Lock()
        self._stopped = False
        self.store: ClusterStore | None = None
        self.runtime: WorkerRuntime | None = None
        self.cadence: CadenceLifecycle[HostCycle] | None = None

    def __repr__(self) -> str:
        return f"WorkerHost(worker_id={self.worker_id!r}, journal={self.settings.journal.text!r})"

    # -- start -------------------------------------------------------------------------------
    @property
    def session(self) -> WorkerSession:
        bound = self._bound
        if bound is None:
            raise RuntimeError("the host has no session yet")
        return session_view(bound.record, _wall_ms())

    def start(self) -> WorkerSession:
        """Own the journal, resume or register the session, start the runtime and the cadence.

        :raises HostRefused: the state directory, journal, database or registry refused.
        """
        directories = self._directories()
        ownership = JournalOwnership(directories["journal"])
        self._acquire(ownership)
        try:
            # A host started beside its first replica (the README) may come first: it creates
            # and migrates the schema as a replica does (both serialize on the migrator's lock).
            self.store = ClusterStore(
                self.settings.dsn,
                self.settings.schema,
                pool_size=self.settings.pool_size,
                create_schema=True,
            )
            tasks = ClusterTaskStore(self.store)
            self._registry = WorkerRegistry(self.store)
            self._bind()
            self._spec_for = _spec_reader(tasks)
            receipts = CompletionReceiptStore(directories["receipts"])
            receipts.ensure_directory()
            executor = PosixExecutorPort(
                PosixExecutor(
                    CompletionReceiptStore(directories["receipts"]), env=self._executor_env
                ),
                SpawnJournal(directories["spawns"]),
            )
            store = self.store
            client: ControlPlaneClient = EngineControlPlane(
                store, _registry_session, _wall_ms, observe=_database_time
            )
            if self._wrap_client is not None:
                client = self._wrap_client(client)
            journal = (
                FileJournal(directories["journal"], ownership)
                if self.settings.journal.kind == "file"
                else SqliteJournal(directories["journal"], ownership)
            )
            self.runtime = WorkerRuntime(
                journal,
                client,
                executor,
                receipts,
                session=lambda: self.session,
                clock=_wall_ms,
                lease_duration_ms=self.settings.lease_duration_ms,
                retention_ms=self.settings.retention_ms,
            )
            status = self.runtime.start()
            if status.state is not InboxState.HOLDING:
                raise HostRefused(str(status.code), f"the journal refused to start: {status.code}")
        except BaseException:
            self._abandon(ownership)
            raise
        self.runtime.start_timer()
        self.cadence = CadenceLifecycle(
            "worker_host",
            self._cycle,
            cadence_config(self.settings.cadence_ms, stop_timeout_ms=5_000),
            on_cycle=None if self._on_cycle is None else self._cycle_report,
            report=self._report,
        )
        self.cadence.start()
        return self.session

    def _directories(self) -> dict[str, Path]:
        try:
            self.state.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.chmod(self.state, 0o700)
            out = {name: self.state / name for name in ("journal", "receipts", "spawns")}
            out["journal"].mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise HostRefused(
                "STATE_DIRECTORY", f"--journal {self.state}: {exc.strerror or type(exc).__name__}"
            ) from None
        return out

    def _acquire(self, ownership: JournalOwnership) -> None:
        deadline = time.monotonic() + ACQUIRE_TIMEOUT_S
        while True:
            try:
                ownership.acquire()
                return
            except JournalOwnershipError as exc:
                if exc.code is Code.JOURNAL_LOCKED and time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                raise HostRefused(
                    str(exc.code),
                    f"--journal {self.state}: {exc.code} ({exc.reason}); is another Worker "
                    "running on it?",
                ) from None

    def _abandon(self, ownership: JournalOwnership) -> None:
        with contextlib.suppress(JournalOwnershipError, JournalError):
            ownership.release()
        if self.store is not None:
            self.store.close()

    def _bind(self) -> None:
        """WS-1: resume the saved session, else register a new one; save what was bound."""
        saved, key = self._saved()
        if key is None:
            key = bytes(PrivateKey.generate())
        public = bytes(PrivateKey(key).public_key)
        register = RegisterSession(
            self.worker_id,
            f"s-{secrets.token_hex(12)}",
            self.settings.executor_types,
            self.settings.capacity,
            public,
            self.settings.session_ttl_ms,
        )
        last: SessionDecision | None = None
        for request in session_requests(saved, register):
            last = self._registry.decide(request)
            if isinstance(last, SessionApplied):
                self._bound = _Bound(last.record, key)
                self._renewed_ms = _monotonic_ms()
                self._save(last.record, key)
                return
        code = "SESSION_REFUSED" if last is None else str(last.code)
        raise HostRefused(code, f"the Worker registry refused worker {self.worker_id!r}: {code}")

    def _saved(self) -> tuple[SavedSession | None, bytes | None]:
        path = self.state / SESSION_FILE
        try:
            data = json.loads(path.read_text("ascii"))
            saved = SavedSession(
                str(data["worker_id"]), str(data["session_id"]), int(data["generation"])
            )
            key = bytes.fromhex(str(data["private_key"]))
        except FileNotFoundError:
            return None, None
        except (OSError, ValueError, KeyError, TypeError):
            # An unreadable file only costs the resume: a new session is registered (WS-1).
            return None, None
        return saved, key if len(key) == 32 else None

    def _save(self, record: SessionRecord, key: bytes) -> None:
        body = json.dumps(
            {
                "worker_id": record.worker_id,
                "session_id": record.session_id,
                "generation": record.generation,
                "private_key": key.hex(),
            }
        ).encode("ascii")
        temporary = self.state / f".{SESSION_FILE}.{secrets.token_hex(6)}"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, body)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, self.state / SESSION_FILE)
        directory = os.open(self.state, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    # -- the cadence -------------------------------------------------------------------------
    def _cycle_report(self, report: object) -> None:
        value = getattr(getattr(report, "result", None), "value", None)
        if self._on_cycle is not None and isinstance(value, HostCycle):
            self._on_cycle(value)

    def _cycle(self, context: CycleContext) -> HostCycle:
        runtime = self.runtime
        bound = self._bound
        assert runtime is not None
        assert bound is not None
        cycle = HostCycle(context.ordinal)
        now = _monotonic_ms()
        if heartbeat_due(self._renewed_ms, now, self.settings.session_ttl_ms):
            self._heartbeat(bound)
            cycle.heartbeat = True
        if not self._draining.is_set():
            self._deliver(runtime, cycle)
        cycle.completions = runtime.poll_completions(self._cursor)
        self._cursor = cycle.completions.cursor if cycle.completions.has_more else None
        if retention_due(context.ordinal, self.settings.retention_ms is not None):
            kept = runtime.retention(self._retention_cursor)
            self._retention_cursor = kept.cursor
            cycle.retention = kept.deleted
        return cycle

    def _heartbeat(self, bound: _Bound) -> None:
        record = bound.record
        decision = self._registry.heartbeat(
            record.worker_id,
            record.session_id,
            record.generation,
            ttl_ms=self.settings.session_ttl_ms,
        )
        if isinstance(decision, SessionApplied):
            self._bound = _Bound(decision.record, bound.key)
            self._renewed_ms = _monotonic_ms()
            return
        # The session is gone (expired, stopped or superseded): a new one takes its place; the
        # records of the old one converge by exact replay or stay blocked (E-3, D-8).
        self._bind()

    def _deliver(self, runtime: WorkerRuntime, cycle: HostCycle) -> None:
        bound = self._bound
        assert bound is not None
        assert self.store is not None
        pending = pending_offers(
            self.store,
            self.session,
            bound.key,
            self._spec_for,
            max(1, min(self.settings.capacity, 64)),
        )
        cycle.unreadable = len(pending.unreadable)
        for offer in pending.offers:
            known = runtime.journal.read(offer.offer_id)
            kind = delivery_kind(
                None if known is None else (known.state, known.offer.lease.version),
                offer.lease.version,
            )
            if kind is not None:
                cycle.delivered.append(runtime.deliver(replace(offer, delivery_kind=kind)))

    # -- drain and stop ------------------------------------------------------------------------
    def drain(self) -> None:
        """SIGTERM: the session drains (the dispatcher grants it nothing more, D-8); deliveries
        stop; owned work finishes through the cadence."""
        if self._draining.is_set():
            return
        self._draining.set()
        bound = self._bound
        if bound is not None:
            record = bound.record
            decision = self._registry.drain(record.worker_id, record.session_id, record.generation)
            if isinstance(decision, SessionApplied):
                self._bound = _Bound(decision.record, bound.key)

    def drained(self) -> bool:
        """Whether a draining host may stop now (`kernel.worker_host.drain_finished`)."""
        runtime = self.runtime
        if runtime is None:
            return True
        records: list[tuple[JournalState, int]] = []
        cursor: str | None = None
        while True:
            page = runtime.journal.list(cursor, 64)
            records.extend((r.state, r.offer.lease.expires_at_ms) for r in page.records)
            if not page.has_more:
                break
            cursor = page.cursor
        return drain_finished(records, _wall_ms())

    def stop(self) -> StopResult | None:
        """Stop the cadence, the runtime (lease timer, journal release) and the session
        (offline); close the store. Repeated calls do nothing."""
        with self._guard:
            if self._stopped:
                return None
            self._stopped = True
        result = None if self.cadence is None else self.cadence.stop()
        if self.runtime is not None:
            self.runtime.stop()
        bound = self._bound
        if bound is not None:
            record = bound.record
            # A failure here only leaves the session to expire by itself (its lease is short).
            with contextlib.suppress(Exception):
                self._registry.stop(record.worker_id, record.session_id, record.generation)
        if self.store is not None:
            self.store.close()
        return result


def _spec_reader(tasks: ClusterTaskStore) -> Callable[[Run, str], Mapping[str, object] | None]:
    def spec_for(run: Run, attempt_id: str) -> Mapping[str, object] | None:
        execution = tasks.execution(run.task_id, run.task_revision)
        if execution is None:
            return None
        return offer_execution_spec(run, attempt_id, execution.execution_spec())

    return spec_for


def _registry_session(tx: StorageTransaction, worker_id: str) -> WorkerSession | None:
    """The fenced commands' Worker session, read in their transaction (issue 17 item 2)."""
    assert isinstance(tx, ClusterTransaction)
    return tx.worker_session(worker_id)


_DATABASE_CLOCK = DatabaseClock()


def _database_time(tx: StorageTransaction) -> int:
    """A fenced command's observation time: the database's, read in its transaction after the
    load (ADR-0232 §1; PG-4), so lease expiry is judged on the clock that set it, not on this
    machine's."""
    assert isinstance(tx, ClusterTransaction)
    return _DATABASE_CLOCK.now_ms(tx.connection)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000
