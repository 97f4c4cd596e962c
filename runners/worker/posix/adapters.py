"""The Worker ports on a POSIX host (issue 6 item 6): the real executor, inspector, controller,
receipts and execution contexts of `runners.worker.posix.executor` / `runners.worker.posix.receipts`
behind the neutral ports of `runners.worker.ports` and `runners.worker.recovery`.

- `PosixExecutorPort.start(context)`: the ExecutionSpec's `argv` (a list of strings, never a
  shell line) launched once through `PosixExecutor`; `SpawnRefused` is the port's explicit
  refusal, `SpawnAmbiguous` (and anything else) stays ambiguous. Before the wrapper is spawned
  one line is appended (and fsynced) to the executor's own **spawn journal**
  (`<dir>/spawns.log`, `0600`): offer id and attempt id, nothing else. Counting those lines is
  how the kill matrix counts `Executor.start()` calls across crashes (I-J1): the line is
  durable before any process exists, so a crash cannot hide a spawn.
- `TokenContextFactory.prepare(record, started_at)`: a fresh 256-bit callback token per
  Attempt (`secrets.token_urlsafe(32)`), callback sequence 1 (the Attempt's first and only
  remote completion, T6 requires a sequence above the stored 0).
- `ReceiptEvidence`: the receipt store read and the authenticator's RV-1..RV-5 answer as the
  Reconciler's `ReceiptCheck` (tokens never leave it; only facts do).
"""

from __future__ import annotations

import os
import secrets
import threading
from pathlib import Path

from kernel import Secret
from kernel.specs import CancelReason, StopResult
from kernel.worker import HandleInspection, JournalRecord, ReceiptCheck, ReceiptFacts
from runners.worker.ports import ExecutionContext, ExecutorRefused, PrepareRefused
from runners.worker.posix.executor import (
    DurableHandle,
    LaunchSpec,
    PersistedExecutionController,
    PersistedExecutionInspector,
    PosixExecutor,
    SpawnRefused,
)
from runners.worker.posix.receipts import (
    CompletionReceiptStore,
    ReceiptAuthenticator,
    ReceiptRecordFacts,
    ReceiptStoreError,
)

SPAWN_LOG = "spawns.log"


class SpawnJournal:
    """The executor's own append-only record of start calls (module docstring)."""

    def __init__(self, directory: Path | str, name: str = SPAWN_LOG) -> None:
        self._dir = Path(directory)
        if not self._dir.is_absolute():
            raise ValueError("spawn journal directory must be an absolute path")
        self._name = name
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._dir / self._name

    def append(self, offer_id: str, attempt_id: str) -> None:
        line = f"{offer_id} {attempt_id}\n".encode("ascii")
        with self._lock:
            self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                os.fchmod(fd, 0o600)
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)

    def entries(self) -> list[tuple[str, str]]:
        try:
            text = self.path.read_text("ascii")
        except FileNotFoundError:
            return []
        return [(a, b) for a, b in (line.split(" ") for line in text.splitlines() if line)]


class PosixExecutorPort:
    """`Executor` over `PosixExecutor` (module docstring)."""

    def __init__(self, executor: PosixExecutor, spawns: SpawnJournal) -> None:
        self._executor = executor
        self._spawns = spawns

    def __repr__(self) -> str:
        return "PosixExecutorPort()"

    def start(self, context: ExecutionContext) -> str:
        argv = context.execution_spec.get("argv")
        if (
            not isinstance(argv, list | tuple)
            or not argv
            or not all(isinstance(a, str) for a in argv)
        ):
            raise ExecutorRefused("SPEC_INVALID")
        try:
            spec = LaunchSpec(
                argv=tuple(argv),
                run_id=context.run_id,
                attempt_id=context.attempt_id,
                callback_sequence=context.callback_sequence,
                callback_token=context.callback_token,
                executor_started_at_ms=context.executor_started_at_ms,
            )
        except ValueError:
            raise ExecutorRefused("SPEC_INVALID") from None
        self._spawns.append(context.offer_id, context.attempt_id)
        try:
            handle = self._executor.start(spec)
        except SpawnRefused as refused:
            raise ExecutorRefused(refused.code) from None
        return handle.text

    def wait(self, handle_text: str, timeout_s: float) -> int | None:
        """Wait for (and reap) a child this executor started; `None` on timeout."""
        return self._executor.wait(DurableHandle.parse(handle_text), timeout_s)


class TokenContextFactory:
    """`ExecutionContextFactory` (module docstring)."""

    def __repr__(self) -> str:
        return "TokenContextFactory()"

    def prepare(self, record: JournalRecord, executor_started_at_ms: int) -> ExecutionContext:
        spec = record.offer.execution_spec
        if not isinstance(spec.get("argv"), list):
            raise PrepareRefused("SPEC_INVALID")
        lease = record.offer.lease
        return ExecutionContext(
            offer_id=record.offer_id,
            run_id=lease.run_id,
            attempt_id=lease.attempt_id,
            callback_sequence=1,
            callback_token=Secret.of(secrets.token_urlsafe(32), "callback_token"),
            executor_started_at_ms=executor_started_at_ms,
            execution_spec=spec,
        )


class PosixInspector:
    def __init__(self, inspector: PersistedExecutionInspector | None = None) -> None:
        self._inspector = inspector or PersistedExecutionInspector()

    def inspect(self, executor_handle: str) -> HandleInspection:
        return HandleInspection(self._inspector.inspect(executor_handle).value)


class PosixController:
    def __init__(self, controller: PersistedExecutionController | None = None) -> None:
        self._controller = controller or PersistedExecutionController()

    def stop(self, executor_handle: str) -> StopResult | str:
        outcome = self._controller.stop(executor_handle, CancelReason.RECONCILE)
        conclusive = outcome.conclusive
        return conclusive if conclusive is not None else outcome.value


class ReceiptEvidence:
    """`ReceiptPort` over the edge receipt store and authenticator (module docstring)."""

    def __init__(
        self, store: CompletionReceiptStore, authenticator: ReceiptAuthenticator | None
    ) -> None:
        self._store = store
        self._authenticator = authenticator

    def __repr__(self) -> str:
        return "ReceiptEvidence()"

    def check(self, record: JournalRecord) -> tuple[ReceiptCheck, ReceiptFacts | None]:
        lease = record.offer.lease
        try:
            receipt = self._store.read(lease.attempt_id)
        except ReceiptStoreError:
            return ReceiptCheck.READ_FAILED, None
        if receipt is None:
            return ReceiptCheck.ABSENT, None
        if self._authenticator is None:
            return ReceiptCheck.AUTHENTICATOR_UNAVAILABLE, None
        facts = ReceiptRecordFacts(
            run_id=lease.run_id,
            attempt_id=lease.attempt_id,
            executor_started_at_ms=record.executor_started_at_ms,
            callback_sequence=record.callback_sequence,
            callback_token_sha256=record.callback_token_sha256,
        )
        validation = self._authenticator.validate(receipt, facts)
        if validation.conflict is not None:
            return validation.conflict.check, None
        return ReceiptCheck.VALID, ReceiptFacts(
            callback_sequence=receipt.callback_sequence,
            finished_at_ms=receipt.finished_at_ms,
            exit_code=receipt.exit_code,
            outcome=receipt.outcome,
        )

    def delete(self, attempt_id: str) -> bool:
        try:
            self._store.delete(attempt_id)
        except ReceiptStoreError:
            return False
        return True
