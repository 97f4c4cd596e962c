"""The Worker's effect ports (SPEC §3.5, §3.11, §3.12, §3.15; issue 6 item 2).

Every effect of the Worker runtime goes through one of these, so the receiver, the recovery
passes and the lease lifecycle can run against the real edge control plane, the real journal
adapters and the real POSIX executor, or against a model that crashes at any call:

- `ControlPlaneClient`: the Worker commands T2 (`acknowledge_starting`), T3 (`renew`), T4
  (`acknowledge_running`), T5 (`fail_start`) and T6 (`complete`). Replay semantics are the
  control plane's (T2r, T4r, T6r): an exact repeat answers `Replayed`, so a caller may repeat
  a command whose response it lost. A transport that cannot reach the control plane raises
  `ControlPlaneUnavailable`; the caller then leaves the journal record as it is. Its one read,
  `read_authority` (E-3), answers the lease authority and completion facts recovery builds its
  `ControlPlaneView` from (`kernel.worker.control_plane_view`).
- `ExecutionContextFactory.prepare()`: reclaimable preparation only (§3.5 step 6); it never
  spawns. A refusal is `PrepareRefused(code)`.
- `Executor.start()`: called at most once per offer (I-J1). `ExecutorRefused(code)` is an
  explicit refusal (nothing ran); any other exception is an ambiguous start.
- `PersistedExecutionInspector` / `PersistedExecutionController`: durable-identity probes and
  stops (`runners.worker.posix.executor` on POSIX).

Results and errors carry ids, codes, versions and times only (S-1).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from kernel import Secret
from kernel.specs import StopResult
from kernel.worker import (
    AuthorityFacts,
    CompletionSubmission,
    HandleInspection,
    JournalRecord,
    LeaseAck,
    OfferLease,
)

__all__ = [
    "Clock",
    "ControlPlaneClient",
    "ControlPlaneUnavailable",
    "Controller",
    "ExecutionContext",
    "ExecutionContextFactory",
    "Executor",
    "ExecutorRefused",
    "Inspector",
    "LeaseAck",
    "PrepareRefused",
]


class ControlPlaneUnavailable(Exception):
    """The control plane could not be asked (transport, storage): nothing is known about the
    outcome, so nothing may be written from it. `reason` is a fixed word."""

    def __init__(self, reason: str = "unavailable") -> None:
        super().__init__(f"control plane unavailable: {reason}")
        self.reason = reason


class ControlPlaneClient(Protocol):
    def acknowledge_starting(self, lease: OfferLease) -> LeaseAck: ...

    def renew(self, lease: OfferLease, duration_ms: int) -> LeaseAck: ...

    def acknowledge_running(
        self, lease: OfferLease, executor_handle: str, started_at_ms: int
    ) -> LeaseAck: ...

    def fail_start(self, lease: OfferLease, failure_code: str) -> LeaseAck: ...

    def complete(self, submission: CompletionSubmission) -> LeaseAck: ...

    def read_authority(
        self, run_id: str, attempt_id: str, lease_generation: int
    ) -> AuthorityFacts | None:
        """E-3: the control plane's current facts about the Attempt's lease of
        `lease_generation` (`kernel.worker.AuthorityFacts`), read without writing anything;
        `None` when it knows no such lease.

        :raises ControlPlaneUnavailable: the control plane could not be asked.
        """
        ...


@dataclass(frozen=True, slots=True)
class ExecutionContext:
    """The in-memory execution context handed to the launcher (§3.5 step 7). The raw callback
    token lives only here (a `Secret`); the journal gets its SHA-256."""

    offer_id: str
    run_id: str
    attempt_id: str
    callback_sequence: int
    callback_token: Secret
    executor_started_at_ms: int
    execution_spec: Mapping[str, object] = field(repr=False)
    log_artifact_id: str | None = None


class PrepareRefused(Exception):
    """`prepare()` refused (the Attempt becomes `start_failed`); `code` is low-sensitivity."""

    def __init__(self, code: str = "PREPARE_FAILED") -> None:
        super().__init__(code)
        self.code = code


class ExecutionContextFactory(Protocol):
    def prepare(self, record: JournalRecord, executor_started_at_ms: int) -> ExecutionContext:
        """Reclaimable preparation only; a fresh high-entropy callback token per Attempt."""
        ...


class ExecutorRefused(Exception):
    """`Executor.start()` refused explicitly: the command certainly never ran."""

    def __init__(self, code: str = "START_REFUSED") -> None:
        super().__init__(code)
        self.code = code


class Executor(Protocol):
    def start(self, context: ExecutionContext) -> str:
        """Start once and return the stable durable handle text (§3.5 step 8).

        :raises ExecutorRefused: nothing ran (`start_failed`).
        Any other exception: the outcome is unknown (`recovery_required`), never retried.
        """
        ...


class Inspector(Protocol):
    def inspect(self, executor_handle: str) -> HandleInspection:
        """§3.11 step 3; raising means `probe_failed`."""
        ...


class Controller(Protocol):
    def stop(self, executor_handle: str) -> StopResult | str:
        """§3.15 step 6: re-verify the durable identity, then signal. Returns the stop result
        (`termination_requested`, `already_exited`, or a non-conclusive word); raising means
        "write nothing"."""
        ...


class Clock(Protocol):
    def __call__(self) -> int:
        """Wall time in ms since the epoch (the runner's clock; the kernel never reads one)."""
        ...
