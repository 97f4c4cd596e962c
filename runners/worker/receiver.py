"""The receiver pipeline on the real ports (SPEC §3.5, §3.7; INBOX-01..INBOX-14).

`Receiver.deliver(offer)` is what the authenticated transport calls for one delivery. Every
decision is the kernel's (`kernel.worker.receiver`): `begin` names the first step, `advance`
takes each port's answer and names the next, until the delivery's result. This class only
performs the step it is given: one journal read or write (through the journal engine: the
kernel's `journal_step`, then the revision CAS), one control-plane call, one lease-lifecycle
call, `ExecutionContextFactory.prepare()` or `Executor.start()`, and turns what the port raised
into the answer value the kernel expects. So the §3.7 replay rules, the ACK answer mapping, the
version retry budget and the crash barrier before `Executor.start()` are the kernel's, where the
models and traces check them.

Concurrent deliveries of one `offer_id` join the operation in flight and receive its result
(ADR-0021 §1, `InFlight`). Results carry ids, states, codes and revisions only (S-1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernel import WorkerSession
from kernel.specs import Code, JournalState, RecoveryReason
from kernel.worker import (
    AskFailStart,
    AskRunning,
    AskStarting,
    Delivery,
    FinishDelivery,
    Held,
    HeldLease,
    JournalRecord,
    LaunchDeclined,
    Launched,
    LaunchUnknown,
    LeaseAck,
    LifecycleDone,
    ObserveAnswer,
    Offer,
    PreparationFailed,
    Prepare,
    Prepared,
    Publish,
    ReadFailed,
    ReadRecord,
    ReceiverAnswer,
    ReceiverStep,
    ResultKind,
    StartExecutor,
    TrackLease,
    Unreachable,
    UntrackLease,
    WriteEvent,
    advance,
    begin,
    observation_ms,
    replay_fail_start,
)
from runners.worker.in_flight import InFlight
from runners.worker.journal.engine import JournalEngine
from runners.worker.journal.port import JournalStore
from runners.worker.lease_lifecycle import WorkerLeaseLifecycle
from runners.worker.ports import (
    Clock,
    ControlPlaneClient,
    ControlPlaneUnavailable,
    ExecutionContext,
    ExecutionContextFactory,
    Executor,
    ExecutorRefused,
    PrepareRefused,
)

__all__ = ["DeliveryResult", "Receiver", "ResultKind"]


@dataclass(frozen=True, slots=True)
class DeliveryResult:
    """One delivery's result (S-1: ids, states, codes, revisions only)."""

    offer_id: str
    kind: ResultKind
    code: Code
    state: JournalState | None = None
    recovery_reason: RecoveryReason | None = None
    revision: int | None = None


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
        self._engine = JournalEngine(journal, clock)
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

    def _deliver(self, offer: Offer) -> DeliveryResult:
        return self._drive(*begin(offer, self._runtime(), self._capacity))

    def in_flight(self, offer_id: str) -> bool:
        return self._inflight.active(offer_id)

    def replay_fail_start(self, offer_id: str) -> DeliveryResult | None:
        """§3.7's `start_failed` row on a restart (`kernel.worker.receiver.replay_fail_start`):
        `fail_start` only, with the record's own fences. `None`: the record's row is not that
        one, or an operation on it is in flight."""
        found = self._engine.read(offer_id)
        if isinstance(found, ReadFailed):
            return DeliveryResult(offer_id, ResultKind.STOPPED, found.code)
        if found.record is None:
            return None
        start = replay_fail_start(found.record)
        if start is None:
            return None
        return self._inflight.try_run(offer_id, found.record.offer, lambda: self._drive(*start))

    # -- performing the kernel's steps ------------------------------------------------------------
    def _drive(self, delivery: Delivery, step: ReceiverStep) -> DeliveryResult:
        context: ExecutionContext | None = None
        while not isinstance(step, FinishDelivery):
            answer: ReceiverAnswer
            if isinstance(step, Prepare):
                context, answer = self._prepare(delivery.record, step.executor_started_at_ms)
            elif isinstance(step, StartExecutor):
                assert context is not None  # the kernel names it only after its own Prepare
                answer = self._start(context)
            else:
                answer = self._perform(delivery, step)
            delivery, step = advance(delivery, answer, self._clock())
        return self._result(delivery, step)

    def _perform(self, delivery: Delivery, step: ReceiverStep) -> ReceiverAnswer:
        record = delivery.record
        offer_id = delivery.offer_id
        match step:
            case ReadRecord(offer_id=key):
                return self._engine.read(key)
            case Publish(offer=offer):
                return self._engine.publish(offer)
            case WriteEvent(event=event):
                assert record is not None
                return self._engine.write(record, event)
            case AskStarting(lease=lease):
                return self._ask(lambda: self._client.acknowledge_starting(lease))
            case AskRunning(lease=lease, executor_handle=handle, executor_started_at_ms=at):
                return self._ask(lambda: self._client.acknowledge_running(lease, handle, at))
            case AskFailStart(lease=lease, failure_code=code):
                return self._ask(lambda: self._client.fail_start(lease, code))
            case TrackLease(lease=lease):
                self._lifecycle.track(offer_id, lease, observation_ms(record, self._clock()))
                return LifecycleDone()
            case UntrackLease():
                self._lifecycle.untrack(offer_id)
                return LifecycleDone()
            case HeldLease():
                return Held(self._lifecycle.current(offer_id))
            case ObserveAnswer(answer=answer):
                self._lifecycle.observe(offer_id, answer)
                return LifecycleDone()
        raise AssertionError(f"receiver: no port performs {step!r}")

    def _ask(self, call: Callable[[], LeaseAck]) -> LeaseAck | Unreachable:
        try:
            return call()
        except ControlPlaneUnavailable:
            return Unreachable()

    def _prepare(
        self, record: JournalRecord | None, started_at: int
    ) -> tuple[ExecutionContext | None, Prepared | PreparationFailed]:
        assert record is not None
        try:
            context = self._factory.prepare(record, started_at)
        except PrepareRefused as refused:
            return None, PreparationFailed(refused.code)
        except Exception:  # preparation is reclaimable: nothing irreversible happened
            return None, PreparationFailed(Code.PREPARE_FAILED.value)
        return context, Prepared(
            offer_id=context.offer_id,
            run_id=context.run_id,
            attempt_id=context.attempt_id,
            callback_sequence=context.callback_sequence,
            callback_token=context.callback_token,
            executor_started_at_ms=context.executor_started_at_ms,
            log_artifact_id=context.log_artifact_id,
        )

    def _start(self, context: ExecutionContext) -> Launched | LaunchDeclined | LaunchUnknown:
        try:
            return Launched(self._executor.start(context))
        except ExecutorRefused as refused:
            return LaunchDeclined(refused.code)
        except Exception:  # ambiguous: the command may run
            return LaunchUnknown()

    def _result(self, delivery: Delivery, finish: FinishDelivery) -> DeliveryResult:
        record = delivery.record
        if record is None or finish.kind is ResultKind.REJECTED:
            return DeliveryResult(delivery.offer_id, finish.kind, finish.code)
        return DeliveryResult(
            record.offer_id,
            finish.kind,
            finish.code,
            record.state,
            record.recovery_reason,
            record.revision,
        )
