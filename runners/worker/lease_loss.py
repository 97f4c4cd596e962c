"""The lease-loss coordinator wired to the journal and the controller (SPEC §3.15; INBOX-40,
INBOX-41).

`LeaseLossCoordinator.on_lost(snapshot, reason)` is what the Worker lease lifecycle's
synchronous notification calls (`runners.worker.lease_lifecycle`). Per notification, in the
kernel's order (`kernel.worker.lease_loss`): recompute the offer id from the snapshot's
authority and read the record; the full authority must match; a completed or already
lease-lost record is left alone; only a state that may own local execution proceeds; with no
durable handle write `lease_lost_local_execution_unverified`; otherwise ask the controller to
stop the durable handle (it re-verifies the identity itself) and write `_stopped` or
`_unverified` from its answer, nothing when it raised. Writes use the revision CAS; after a
conflict a record that is now completed or lease-lost finishes quietly.

It holds no control-plane client, Run repository or Run command service: an old Worker whose
fence failed cannot mark anything `lost`. Concurrent notifications for one offer coalesce.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from kernel import offer_id as derive_offer_id
from kernel.specs import Code, StopResult
from kernel.worker import (
    FinishLeaseLoss,
    Found,
    JournalRecord,
    LeaseLossReason,
    LeaseLossResult,
    LeaseLost,
    OfferLease,
    StopHandle,
    Written,
    after_stop,
    decide_lease_loss,
    quiet_after_conflict,
    result_of,
)
from runners.worker.in_flight import InFlight
from runners.worker.journal.engine import JournalEngine
from runners.worker.journal.port import JournalStore
from runners.worker.ports import Controller


@dataclass(frozen=True, slots=True)
class LeaseLossOutcome:
    """One notification's result (S-1). `error` is a code when the stop must be retried
    explicitly (the controller raised) or the write failed for another reason."""

    offer_id: str
    result: LeaseLossResult | None
    reason: LeaseLossReason
    error: Code | None = None


class LeaseLossCoordinator:
    def __init__(
        self, journal: JournalStore, controller: Controller, clock: Callable[[], int]
    ) -> None:
        self._engine = JournalEngine(journal, clock)
        self._controller = controller
        self._inflight: InFlight[str, LeaseLossOutcome] = InFlight()
        self._lock = threading.Lock()
        self.outcomes: list[LeaseLossOutcome] = []

    def __repr__(self) -> str:
        return "LeaseLossCoordinator()"

    def on_lost(self, snapshot: OfferLease, reason: LeaseLossReason) -> LeaseLossOutcome:
        key = derive_offer_id(
            snapshot.attempt_id,
            snapshot.lease_generation,
            snapshot.worker_id,
            snapshot.worker_session_id,
            snapshot.worker_generation,
        )
        return self._inflight.run(key, None, lambda: self._record(key, snapshot, reason))

    def _record(self, key: str, snapshot: OfferLease, reason: LeaseLossReason) -> LeaseLossOutcome:
        outcome = self._handle(key, snapshot, reason)
        with self._lock:
            self.outcomes.append(outcome)
        return outcome

    def _handle(self, key: str, snapshot: OfferLease, reason: LeaseLossReason) -> LeaseLossOutcome:
        found = self._engine.read(key)
        if not isinstance(found, Found):
            return LeaseLossOutcome(key, None, reason, found.code)
        record = found.record
        decision = decide_lease_loss(record, snapshot)
        if isinstance(decision, FinishLeaseLoss):
            return LeaseLossOutcome(key, decision.result, reason)
        assert record is not None
        if isinstance(decision, StopHandle):
            try:
                answer: StopResult | str | None = self._controller.stop(decision.executor_handle)
            except Exception:  # write nothing: the stop can be retried explicitly
                answer = None
            event = after_stop(answer)
            if event is None:
                return LeaseLossOutcome(key, None, reason, Code.PROBE_FAILED)
        else:
            event = decision.event
        return self._write(key, record, event, reason)

    def _write(
        self, key: str, record: JournalRecord, event: LeaseLost, reason: LeaseLossReason
    ) -> LeaseLossOutcome:
        if isinstance(self._engine.write(record, event), Written):
            return LeaseLossOutcome(key, result_of(event), reason)
        found = self._engine.read(key)
        if not isinstance(found, Found):
            return LeaseLossOutcome(key, None, reason, found.code)
        now = found.record
        if quiet_after_conflict(now):  # someone else settled it: finish quietly
            settled = decide_lease_loss(now, record.offer.lease)
            if isinstance(settled, FinishLeaseLoss):
                return LeaseLossOutcome(key, settled.result, reason)
        return LeaseLossOutcome(key, None, reason, Code.JOURNAL_REVISION_CONFLICT)
