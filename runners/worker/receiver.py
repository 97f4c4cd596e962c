"""The receiver pipeline, in the fixed order of SPEC §3.5 (ADR-0021 §1; INBOX-01..INBOX-14).

`Receiver.deliver(offer)` is what the authenticated transport calls for one delivery:

1. validate (§3.8, `kernel.worker.receiver.decide_delivery`): every refusal before
   any journal write;
2. persist the offer as `accepted` (first publish), or merge a higher lease version into the
   known record and continue from its state (§3.7);
3. `acknowledge_starting` (T2) -> `starting_acknowledged` with the returned lease;
4. hand the lease to the lease lifecycle (tracking starts only here);
5. `ExecutionContextFactory.prepare()` (reclaimable only);
6. write `launching` with the callback pair and the start time, **then** `Executor.start()`;
7. `started` with the durable handle; `acknowledge_running` (T4) with the lifecycle's version;
   `running_acknowledged`.

Start failures write `start_failed`, then `fail_start` (T5), then
`start_failure_acknowledged`. An ambiguous `Executor.start()` error writes
`recovery_required(launch_outcome_unknown)` and is never retried. A version mismatch on the
running or failure ACK refreshes the version from the lease lifecycle and tries at most
`ACK_TRIES` (3) times in all, without sleeping; then the record stays where it is.

Every record this writes is the kernel's `journal_step` revision, written with the journal's
revision CAS. The Executor is reachable from one line only, right after the `launching`
revision is durable, and only from `starting_acknowledged` (I-J1, I-J2): a record found in
`launching` by a delivery that has no operation in flight in this process becomes
`recovery_required(launch_outcome_unknown)`. Concurrent deliveries of one `offer_id` join the
operation in flight and receive its result.

Results carry ids, states, codes and revisions only (S-1).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from dataclasses import dataclass

from kernel.entities import WorkerSession
from kernel.identity import IdentityError, is_offer_id, token_digest
from kernel.outcomes import Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.journal import JournalState, RecoveryReason
from kernel.worker.journal import (
    ControlPlaneAlreadyRunning,
    ControlPlaneTerminal,
    DeliveryAccepted,
    FailStartAcknowledged,
    HandleReturned,
    JournalApplied,
    JournalEvent,
    LaunchOutcomeUnknown,
    LeaseVersionAdvanced,
    PrepareFailed,
    PrepareSucceeded,
    RunningAcknowledged,
    StartingAcknowledged,
    StartRefused,
    journal_step,
)
from kernel.worker.receiver import Accept, Merge, decide_delivery
from kernel.worker.record import JournalRecord, Offer, OfferLease
from runners.worker.in_flight import InFlight
from runners.worker.journal.port import JournalError, JournalStore
from runners.worker.lease_lifecycle import WorkerLeaseLifecycle
from runners.worker.ports import (
    Clock,
    ControlPlaneClient,
    ControlPlaneUnavailable,
    ExecutionContext,
    ExecutionContextFactory,
    Executor,
    ExecutorRefused,
    LeaseAck,
    PrepareRefused,
)

S = JournalState

#: §3.5 [decision]: running/failure ACK version retries, 3 calls in all, no sleep loop.
ACK_TRIES = 3

_ACCEPTED_ACK = frozenset({Code.APPLIED, Code.ALREADY_APPLIED})
_FINAL = frozenset({S.START_FAILURE_ACKNOWLEDGED, S.COMPLETION_ACKNOWLEDGED})
#: States with a durable handle of a local execution this Worker started (§3.3).
_OWNS_EXECUTION = frozenset({S.STARTED, S.RUNNING_ACKNOWLEDGED})


class ResultKind(enum.StrEnum):
    """How a delivery ended."""

    APPLIED = "applied"  # the pipeline moved the record forward
    REPLAYED = "replayed"  # the record's state answers the delivery (§3.7)
    REJECTED = "rejected"  # refused before any journal write (§3.8)
    STOPPED = "stopped"  # an ACK was refused, a port failed or a write failed: left as is


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """One delivery's result (S-1: ids, states, codes, revisions only)."""

    offer_id: str
    kind: ResultKind
    code: Code
    state: JournalState | None = None
    recovery_reason: RecoveryReason | None = None
    revision: int | None = None


class _Stop(Exception):
    def __init__(self, code: Code, record: JournalRecord | None) -> None:
        super().__init__(str(code))
        self.code = code
        self.record = record


class Receiver:
    """§3.5 (module docstring).

    :param runtime: the bound Worker runtime's current session view (D-5..D-8).
    :param capacity: the journal's capacity as the kernel's D-9 sees it; the adapter
        enforces it again on create (F-7), so a full journal is refused either way before any
        write.
    """

    def __init__(
        self,
        journal: JournalStore,
        *,
        runtime: Callable[[], WorkerSession],
        client: ControlPlaneClient,
        lifecycle: WorkerLeaseLifecycle,
        factory: ExecutionContextFactory,
        executor: Executor,
        clock: Clock,
        capacity: int = 1024,
    ) -> None:
        self._journal = journal
        self._runtime = runtime
        self._client = client
        self._lifecycle = lifecycle
        self._factory = factory
        self._executor = executor
        self._clock = clock
        self._capacity = capacity
        self._inflight: InFlight[str, DeliveryResult] = InFlight()

    def __repr__(self) -> str:
        return f"Receiver({self._inflight!r})"

    # -- the transport's entry point ----------------------------------------------------------
    def deliver(self, offer: Offer) -> DeliveryResult:
        """Handle one delivery; concurrent duplicates of one `offer_id` join the one in
        flight (ADR-0021 §1) and get its result; a different delivery of the same offer id (a
        newer lease, a conflict) runs after it, through its own validation (WR-5)."""
        return self._inflight.run(offer.offer_id, offer, lambda: self._deliver(offer))

    def in_flight(self, offer_id: str) -> bool:
        return self._inflight.active(offer_id)

    def replay_fail_start(self, offer_id: str) -> DeliveryResult | None:
        """§3.7's `start_failed` row on a restart: replay `fail_start` only, with the record's
        own fences, until `start_failure_acknowledged`. No delivery is validated (T5 released
        the lease, so no redelivery will come, and the stored lease may have expired since):
        the control plane's exact replay decides. The Executor is unreachable from here.
        `None`: the record is not `start_failed`, or an operation on it is in flight."""
        try:
            record = self._journal.read(offer_id)
        except JournalError as exc:
            return DeliveryResult(offer_id, ResultKind.STOPPED, exc.code)
        if record is None or record.state is not S.START_FAILED:
            return None

        def replay() -> DeliveryResult:
            try:
                return self._fail_start(record)
            except _Stop as stop:
                return self._stopped(offer_id, stop)

        return self._inflight.try_run(offer_id, record.offer, replay)

    # -- the pipeline ---------------------------------------------------------------------------
    def _deliver(self, offer: Offer) -> DeliveryResult:
        key = offer.offer_id
        if not isinstance(key, str) or not is_offer_id(key):
            return DeliveryResult(str(key)[:64], ResultKind.REJECTED, Code.OFFER_INVALID)
        try:
            existing = self._journal.read(key)
        except JournalError as exc:
            return DeliveryResult(key, ResultKind.STOPPED, exc.code)
        now = self._now(existing)
        decision = decide_delivery(
            offer,
            existing,
            self._runtime(),
            records_held=0,
            capacity=self._capacity,
            observed_at_ms=now,
        )
        if isinstance(decision, Rejected):
            return DeliveryResult(key, ResultKind.REJECTED, decision.code)
        try:
            if isinstance(decision, Accept):
                record = self._create(decision.offer, now)
                return self._pipeline(record, replay=False)
            assert existing is not None
            record = existing
            if isinstance(decision, Merge):
                record = self._write(record, decision.event)
            return self._pipeline(record, replay=True)
        except _Stop as stop:
            return self._stopped(key, stop)

    def _pipeline(self, record: JournalRecord, *, replay: bool) -> DeliveryResult:
        """§3.5 from the record's state on (§3.7 for a known record)."""
        state = record.state
        if state is S.ACCEPTED:
            record = self._acknowledge_starting(record)
            if record.state is not S.STARTING_ACKNOWLEDGED:
                return self._result(record, ResultKind.APPLIED, Code.APPLIED)
            state = record.state
        if state is S.STARTING_ACKNOWLEDGED:
            return self._first_start(record)
        if state is S.LAUNCHING:
            # §3.7: this process has no operation in flight for the offer (a joiner never gets
            # here: `deliver` waits for the one in flight), so the outcome is unknown.
            record = self._write(record, LaunchOutcomeUnknown())
            return self._result(record, ResultKind.APPLIED, Code.LAUNCH_OUTCOME_UNKNOWN)
        if state in _OWNS_EXECUTION:
            # A known local execution (after a restart, a redelivery is how the lease comes
            # back): keep renewing it. Its tracking started at `starting_acknowledged` once.
            self._lifecycle.track(record.offer_id, record.offer.lease, self._now(record))
        if state is S.STARTED:
            return self._running_ack(record)
        if state is S.START_FAILED:
            return self._fail_start(record)
        kind = ResultKind.REPLAYED if replay else ResultKind.APPLIED
        code = {
            S.RUNNING_ACKNOWLEDGED: Code.ALREADY_APPLIED,
            S.START_FAILURE_ACKNOWLEDGED: Code.ALREADY_APPLIED,
            S.RECOVERY_REQUIRED: Code.ALREADY_APPLIED,
            S.COMPLETION_ACKNOWLEDGED: Code.ALREADY_TERMINAL,
        }[state]
        return self._result(record, kind, code)

    def _acknowledge_starting(self, record: JournalRecord) -> JournalRecord:
        ack = self._ask(record, lambda: self._client.acknowledge_starting(record.offer.lease))
        if ack.code in _ACCEPTED_ACK:
            lease = ack.lease_after(record.offer.lease)
            return self._write(record, StartingAcknowledged(lease))
        if ack.code is Code.ALREADY_RUNNING:
            return self._write(record, ControlPlaneAlreadyRunning())
        if ack.code is Code.ALREADY_TERMINAL:
            return self._write(record, ControlPlaneTerminal())
        raise _Stop(ack.code, record)

    def _first_start(self, record: JournalRecord) -> DeliveryResult:
        lease = record.offer.lease
        self._lifecycle.track(record.offer_id, lease, self._now(record))  # step 5
        started_at = self._now(record)
        try:
            context = self._factory.prepare(record, started_at)
            event: JournalEvent = self._launching_event(record, context, started_at)
        except PrepareRefused as refused:
            record = self._write(record, PrepareFailed(_failure_code(refused.code)))
            return self._fail_start(record)
        except Exception:  # preparation is reclaimable: nothing irreversible happened
            record = self._write(record, PrepareFailed(Code.PREPARE_FAILED.value))
            return self._fail_start(record)
        record = self._write(record, event)  # the crash barrier: durable before start()
        try:
            handle = self._executor.start(context)
        except ExecutorRefused as refused:
            record = self._write(record, StartRefused(_failure_code(refused.code)))
            return self._fail_start(record)
        except Exception:  # ambiguous: the command may run; never retried (§3.5 decision)
            record = self._write(record, LaunchOutcomeUnknown())
            return self._result(record, ResultKind.APPLIED, Code.LAUNCH_OUTCOME_UNKNOWN)
        if not isinstance(handle, str) or not handle:
            record = self._write(record, LaunchOutcomeUnknown())
            return self._result(record, ResultKind.APPLIED, Code.LAUNCH_OUTCOME_UNKNOWN)
        record = self._write(record, HandleReturned(handle, context.log_artifact_id))
        return self._running_ack(record)

    def _launching_event(
        self, record: JournalRecord, context: ExecutionContext, started_at: int
    ) -> PrepareSucceeded:
        """§3.5 step 7: validate the token and sequence the factory prepared."""
        if (
            context.offer_id != record.offer_id
            or context.run_id != record.offer.lease.run_id
            or context.attempt_id != record.offer.lease.attempt_id
            or context.executor_started_at_ms != started_at
            or type(context.callback_sequence) is not int
            or context.callback_sequence < 1
        ):
            raise PrepareRefused(Code.PREPARE_FAILED.value)
        try:
            digest = token_digest(context.callback_token.reveal())
        except (IdentityError, AttributeError):
            raise PrepareRefused(Code.PREPARE_FAILED.value) from None
        return PrepareSucceeded(
            callback_sequence=context.callback_sequence,
            callback_token_sha256=digest,
            executor_started_at_ms=started_at,
            log_artifact_id=context.log_artifact_id,
        )

    def _running_ack(self, record: JournalRecord) -> DeliveryResult:
        handle, started_at = record.executor_handle, record.executor_started_at_ms
        assert handle is not None  # §3.3: required in `started`
        assert started_at is not None
        ack = self._with_version_retry(
            record, lambda lease: self._client.acknowledge_running(lease, handle, started_at)
        )
        if ack.code in _ACCEPTED_ACK or ack.code is Code.ALREADY_RUNNING:
            record = self._write(record, RunningAcknowledged())
            return self._result(record, ResultKind.APPLIED, ack.code)
        if ack.code is Code.ALREADY_TERMINAL:
            record = self._write(record, ControlPlaneTerminal())
            return self._result(record, ResultKind.APPLIED, Code.CONTROL_PLANE_TERMINAL)
        raise _Stop(ack.code, record)

    def _fail_start(self, record: JournalRecord) -> DeliveryResult:
        code = record.start_failure_code or Code.START_FAILED.value
        current = record

        def call(lease: OfferLease) -> LeaseAck:
            # T5's exact replay needs the version it was sent with (version + 1 after it):
            # a newer version from the lease lifecycle is merged into the record first, so a
            # restart that replays from the record alone sends the identical command (WR-10).
            nonlocal current
            if lease.version > current.offer.lease.version:
                merge = LeaseVersionAdvanced(lease, current.offer.delivery_kind)
                current = self._write(current, merge)
            return self._client.fail_start(current.offer.lease, code)

        ack = self._with_version_retry(record, call)
        if ack.code in _ACCEPTED_ACK or ack.code is Code.ALREADY_TERMINAL:
            current = self._write(current, FailStartAcknowledged())
            return self._result(current, ResultKind.APPLIED, ack.code)
        raise _Stop(ack.code, current)

    def _with_version_retry(
        self, record: JournalRecord, call: Callable[[OfferLease], LeaseAck]
    ) -> LeaseAck:
        """§3.5: the version held by the lease lifecycle; on a mismatch refresh it and retry,
        at most `ACK_TRIES` calls in all, and only with a version not tried yet."""
        tried: set[int] = set()
        lease = self._lifecycle.current(record.offer_id) or record.offer.lease
        ack = LeaseAck(Code.LEASE_VERSION_MISMATCH)
        for _ in range(ACK_TRIES):
            tried.add(lease.version)
            ack = self._ask(record, functools.partial(call, lease))
            self._lifecycle.observe(record.offer_id, ack)
            if ack.code is not Code.LEASE_VERSION_MISMATCH:
                return ack
            refreshed = self._lifecycle.current(record.offer_id)
            if refreshed is None or refreshed.version in tried:
                break
            lease = refreshed
        if ack.code is Code.LEASE_VERSION_MISMATCH and len(tried) >= ACK_TRIES:
            return LeaseAck(Code.ACK_VERSION_RETRIES_EXHAUSTED)
        return ack

    # -- writes and answers -----------------------------------------------------------------------
    def _ask(self, record: JournalRecord, call: Callable[[], LeaseAck]) -> LeaseAck:
        try:
            return call()
        except ControlPlaneUnavailable:
            raise _Stop(Code.CONTROL_PLANE_UNAVAILABLE, record) from None

    def _create(self, offer: Offer, now: int) -> JournalRecord:
        step = journal_step(None, DeliveryAccepted(offer), now)
        if not isinstance(step, JournalApplied) or step.record is None:
            code = step.code if isinstance(step, Rejected | Replayed) else Code.OFFER_INVALID
            raise _Stop(code, None)
        try:
            self._journal.create(step.record)
        except JournalError as exc:
            raise _Stop(exc.code, None) from None
        return step.record

    def _write(self, record: JournalRecord, event: JournalEvent) -> JournalRecord:
        """One §3.6 step as the kernel builds it, written with the revision CAS."""
        step = journal_step(record, event, self._now(record))
        if isinstance(step, Replayed):
            return record
        if isinstance(step, Rejected):
            raise _Stop(step.code, record)
        new = step.record
        assert new is not None  # deletion is retention's, never the receiver's
        try:
            self._journal.replace(new, record.revision)
        except JournalError as exc:
            raise _Stop(exc.code, record) from None
        if new.state in _FINAL:
            self._lifecycle.untrack(new.offer_id)
        return new

    def _now(self, record: JournalRecord | None) -> int:
        """The runner's clock, never behind the record's last revision (the kernel refuses
        time running backwards, so a wall clock stepping back must not wedge a record)."""
        now = self._clock()
        return now if record is None else max(now, record.updated_at_ms)

    def _result(self, record: JournalRecord, kind: ResultKind, code: Code) -> DeliveryResult:
        return DeliveryResult(
            record.offer_id, kind, code, record.state, record.recovery_reason, record.revision
        )

    def _stopped(self, offer_id: str, stop: _Stop) -> DeliveryResult:
        record = stop.record
        if record is None:
            return DeliveryResult(offer_id, ResultKind.REJECTED, stop.code)
        return DeliveryResult(
            offer_id,
            ResultKind.STOPPED,
            stop.code,
            record.state,
            record.recovery_reason,
            record.revision,
        )


def _failure_code(code: str) -> str:
    """A start failure code is stored in the journal and sent with T5: a short upper-case
    word, or the generic one (never free text, S-1)."""
    ok = 0 < len(code) <= 64 and all(c.isupper() or c.isdigit() or c == "_" for c in code)
    return code if ok else Code.START_FAILED.value
