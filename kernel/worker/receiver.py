"""The receiver pipeline as pure steps (SPEC §3.5, §3.7; INBOX-01..INBOX-14).

Like the Coordinator's `plan_completion` -> `after_submission` -> `after_journal_write`, the
receiver's decisions are values: `begin(offer, session, capacity)` names the first thing the
runner does, and `advance(delivery, answer, observed_at_ms)` takes the answer of the step just
performed and names the next one, until `FinishDelivery`. The runner
(`runners/worker/receiver.py`) performs exactly the step it is given (one journal read or write,
one control-plane call, one lease-lifecycle call, `prepare()` or `Executor.start()`) and feeds
the answer back; it decides nothing.

Where the pipeline goes after a record is durable is §3.7's `REPLAY` table, read for the state
the record is in now, whether the record was found by the delivery or just written by it ("continue
with the record's state", §3.5 step 3):

- `replay_starting_ack`: the starting ACK (T2), its answer mapped by `ACK_ANSWERS`;
- `continue_first_start`: track the lease (step 5), `prepare()`, then the `launching` barrier;
- `join_or_launch_unknown`: `Executor.start()` only when this very operation wrote the barrier
  (the in-flight operation it joins is itself); a `launching` record found by a delivery or a
  restart becomes `recovery_required(launch_outcome_unknown)` (INBOX-05);
- `replay_running_ack`: the running ACK (T4) with the lease lifecycle's version, retried on a
  version mismatch at most `ACK_VERSION_TRIES` calls in all (INBOX-06, INBOX-14);
- `replay_fail_start`: `fail_start` (T5), the lifecycle's newer version merged into the record
  first so a replay from the record alone is exact (WR-10; INBOX-08);
- the final and `recovery_required` rows answer with the record's state (`Replayed`).

The Executor is reachable from one place only: the `launching` revision this operation wrote is
durable (I-J1, I-J2). Results carry ids, states, codes and revisions only (S-1).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Final

from kernel.entities import WorkerSession
from kernel.identity import IdentityError, Secret, is_offer_id, token_digest
from kernel.outcomes import Rejected
from kernel.specs.budgets import budget_for
from kernel.specs.codes import Code
from kernel.specs.journal import (
    ACK_ANSWERS,
    FINAL_STATES,
    REPLAY,
    VERSION_RETRIED,
    AckKind,
    JournalTrigger,
    RecoveryReason,
    ReplayAction,
)
from kernel.specs.states import Profile
from kernel.worker.delivery import Accept, Merge, decide_delivery
from kernel.worker.journal import (
    ControlPlaneAlreadyRunning,
    ControlPlaneTerminal,
    FailStartAcknowledged,
    Found,
    HandleReturned,
    JournalEvent,
    LaunchOutcomeUnknown,
    LeaseVersionAdvanced,
    PrepareFailed,
    PrepareSucceeded,
    ReadFailed,
    RunningAcknowledged,
    StartingAcknowledged,
    StartRefused,
    WriteFailed,
    Written,
    observation_ms,
)
from kernel.worker.record import JournalRecord, LeaseAck, Offer, OfferLease

__all__ = [
    "ACK_VERSION_TRIES",
    "AskFailStart",
    "AskRunning",
    "AskStarting",
    "Delivery",
    "FinishDelivery",
    "Found",
    "Held",
    "HeldLease",
    "LaunchDeclined",
    "LaunchUnknown",
    "Launched",
    "LifecycleDone",
    "ObserveAnswer",
    "PreparationFailed",
    "Prepare",
    "Prepared",
    "Publish",
    "ReadFailed",
    "ReadRecord",
    "ReceiverAnswer",
    "ReceiverStep",
    "ResultKind",
    "StartExecutor",
    "TrackLease",
    "Unreachable",
    "UntrackLease",
    "WriteEvent",
    "advance",
    "begin",
    "failure_code",
    "replay_fail_start",
]

#: §3.5 [decision B-42]: running/failure ACK calls in all on a version mismatch (no sleep loop).
ACK_VERSION_TRIES: Final = budget_for(Profile.WORKER).ack_version_mismatch_attempts or 1


class ResultKind(enum.StrEnum):
    """How a delivery ended."""

    APPLIED = "applied"  # the pipeline moved the record forward
    REPLAYED = "replayed"  # the record's state answers the delivery (§3.7)
    REJECTED = "rejected"  # refused before any journal write (§3.8)
    STOPPED = "stopped"  # an ACK was refused, a port failed or a write failed: left as is


# -- the steps: what the runner does next ---------------------------------------------------
@dataclass(frozen=True, slots=True)
class ReadRecord:
    """Read the journal record of `offer_id` (`Found` or `ReadFailed`)."""

    offer_id: str


@dataclass(frozen=True, slots=True)
class Publish:
    """Create revision 0 (`accepted`) through the journal engine (`Written` / `WriteFailed`)."""

    offer: Offer


@dataclass(frozen=True, slots=True)
class WriteEvent:
    """Write this event on the current record through the journal engine (the kernel's
    `journal_step`, then the revision CAS)."""

    event: JournalEvent


@dataclass(frozen=True, slots=True)
class AskStarting:
    """`acknowledge_starting` (T2) with `lease` (a `LeaseAck` or `Unreachable`)."""

    lease: OfferLease


@dataclass(frozen=True, slots=True)
class AskRunning:
    """`acknowledge_running` (T4)."""

    lease: OfferLease
    executor_handle: str
    executor_started_at_ms: int


@dataclass(frozen=True, slots=True)
class AskFailStart:
    """`fail_start` (T5)."""

    lease: OfferLease
    failure_code: str


@dataclass(frozen=True, slots=True)
class TrackLease:
    """Hand the lease to the lease lifecycle (§3.5 step 5; `LifecycleDone`)."""

    lease: OfferLease


@dataclass(frozen=True, slots=True)
class UntrackLease:
    """The record is final: the lease lifecycle has nothing left to renew (`LifecycleDone`)."""


@dataclass(frozen=True, slots=True)
class HeldLease:
    """Ask the lease lifecycle for the latest lease it holds for the offer (`Held`)."""


@dataclass(frozen=True, slots=True)
class ObserveAnswer:
    """Give the ACK's version to the lease lifecycle (T4 moves the version too; `LifecycleDone`)."""

    answer: LeaseAck


@dataclass(frozen=True, slots=True)
class Prepare:
    """`ExecutionContextFactory.prepare(record, executor_started_at_ms)`: reclaimable only
    (`Prepared` or `PreparationFailed`)."""

    executor_started_at_ms: int


@dataclass(frozen=True, slots=True)
class StartExecutor:
    """`Executor.start(context)` with the context `Prepare` returned (`Launched`,
    `LaunchDeclined` or `LaunchUnknown`). Named only right after this operation's `launching`
    revision is durable."""


@dataclass(frozen=True, slots=True)
class FinishDelivery:
    """The delivery's result: `kind` and `code`, with the record as it is durable now."""

    kind: ResultKind
    code: Code


ReceiverStep = (
    ReadRecord
    | Publish
    | WriteEvent
    | AskStarting
    | AskRunning
    | AskFailStart
    | TrackLease
    | UntrackLease
    | HeldLease
    | ObserveAnswer
    | Prepare
    | StartExecutor
    | FinishDelivery
)


# -- the answers: what the port said ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Unreachable:
    """The control plane could not be asked: nothing is known about the outcome."""


@dataclass(frozen=True, slots=True)
class Held:
    lease: OfferLease | None


@dataclass(frozen=True, slots=True)
class LifecycleDone:
    """A lease-lifecycle call returned (it answers nothing)."""


@dataclass(frozen=True, slots=True)
class Prepared:
    """What the factory prepared: the context's identity, the callback pair (the raw token as
    a `Secret`, whose digest only is journaled) and the start time."""

    offer_id: str
    run_id: str
    attempt_id: str
    callback_sequence: object
    callback_token: object
    executor_started_at_ms: int
    log_artifact_id: str | None = None


@dataclass(frozen=True, slots=True)
class PreparationFailed:
    """The factory refused (its code) or raised (`PREPARE_FAILED`)."""

    code: str


@dataclass(frozen=True, slots=True)
class Launched:
    """`Executor.start()` returned; `handle` is whatever it returned."""

    handle: object


@dataclass(frozen=True, slots=True)
class LaunchDeclined:
    """An explicit refusal: the command certainly never ran."""

    code: str


@dataclass(frozen=True, slots=True)
class LaunchUnknown:
    """Any other exception from `Executor.start()`: the outcome is unknown."""


ReceiverAnswer = (
    Found
    | ReadFailed
    | Written
    | WriteFailed
    | LeaseAck
    | Unreachable
    | Held
    | LifecycleDone
    | Prepared
    | PreparationFailed
    | Launched
    | LaunchDeclined
    | LaunchUnknown
)


class _Stage(enum.StrEnum):
    PIPELINE = "pipeline"
    FAIL_START_MERGE = "fail_start_merge"  # merging the lifecycle's version before T5


@dataclass(frozen=True, slots=True)
class Delivery:
    """Where one delivery (or one restart replay) is. `record` is the revision durable now;
    `found` says the delivery found it (a replay, §3.7) rather than created it; `reached` says
    this operation wrote a pipeline step on it; `barrier` says this operation's own `launching`
    revision is durable (the only way to `Executor.start()`)."""

    offer_id: str
    offer: Offer | None = None
    session: WorkerSession | None = None
    capacity: int = 1
    record: JournalRecord | None = None
    pending: ReceiverStep | None = None
    found: bool = False
    reached: bool = False
    tracked: bool = False
    untracked: bool = False
    barrier: bool = False
    stage: _Stage = _Stage.PIPELINE
    ack: AckKind | None = None
    answer: LeaseAck | None = None
    candidate: OfferLease | None = None
    tried: frozenset[int] = frozenset()
    failure: str | None = None
    log_artifact_id: str | None = None
    code: Code = Code.APPLIED

    def __repr__(self) -> str:
        state = None if self.record is None else self.record.state.value
        return f"Delivery(offer_id={self.offer_id!r}, state={state!r}, pending={self.pending!r})"


Next = tuple[Delivery, ReceiverStep]


def _to(delivery: Delivery, step: ReceiverStep, **changes: object) -> Next:
    moved = dataclasses.replace(delivery, pending=step, **changes)  # type: ignore[arg-type]
    return moved, step


def _finish(delivery: Delivery, kind: ResultKind, code: Code) -> Next:
    return _to(delivery, FinishDelivery(kind, code))


def _stop(delivery: Delivery, code: Code) -> Next:
    """Left as it is: `rejected` when nothing was ever written, else `stopped`."""
    kind = ResultKind.REJECTED if delivery.record is None else ResultKind.STOPPED
    return _finish(delivery, kind, code)


# -- entry points ---------------------------------------------------------------------------
def begin(offer: Offer, session: WorkerSession, capacity: int) -> Next:
    """One delivery of `offer` to the bound Worker runtime (its current `session`)."""
    key = offer.offer_id
    if not isinstance(key, str) or not is_offer_id(key):
        return _finish(Delivery(str(key)[:64]), ResultKind.REJECTED, Code.OFFER_INVALID)
    delivery = Delivery(key, offer=offer, session=session, capacity=capacity)
    return _to(delivery, ReadRecord(key))


def replay_fail_start(record: JournalRecord) -> Next | None:
    """§3.7's `start_failed` row on a restart: replay `fail_start` only, with the record's own
    fences (no delivery is validated: T5 released the lease, so no redelivery will come, and
    the stored lease may have expired since). `None`: the record's row is not that one."""
    if REPLAY[record.state] is not ReplayAction.REPLAY_FAIL_START:
        return None
    return _fail_start(Delivery(record.offer_id, record=record, found=True))


def failure_code(code: str) -> str:
    """A start failure code is stored in the journal and sent with T5: a short upper-case
    word, or the generic one (never free text, S-1)."""
    ok = 0 < len(code) <= 64 and all(c.isupper() or c.isdigit() or c == "_" for c in code)
    return code if ok else Code.START_FAILED.value


# -- the step function --------------------------------------------------------------------------
def advance(delivery: Delivery, answer: ReceiverAnswer, observed_at_ms: int) -> Next:
    """The next step after `answer` to `delivery.pending` at the runner's clock."""
    pending = delivery.pending
    if isinstance(answer, Unreachable):
        return _stop(delivery, Code.CONTROL_PLANE_UNAVAILABLE)
    match pending, answer:
        case ReadRecord(), Found(record=existing):
            return _decide(delivery, existing, observed_at_ms)
        case ReadRecord(), ReadFailed(code=code):
            return _finish(delivery, ResultKind.STOPPED, code)
        case Publish() | WriteEvent(), WriteFailed(code=code):
            return _stop(delivery, code)
        case Publish() | WriteEvent(), Written(record=record):
            return _written(delivery, pending, record, observed_at_ms)
        case TrackLease(), LifecycleDone():
            return _continue(dataclasses.replace(delivery, tracked=True), observed_at_ms)
        case UntrackLease(), LifecycleDone():
            return _continue(dataclasses.replace(delivery, untracked=True), observed_at_ms)
        case HeldLease(), Held(lease=held):
            return _held(delivery, held)
        case AskStarting() | AskRunning() | AskFailStart(), LeaseAck():
            if delivery.ack in VERSION_RETRIED and answer.version is not None:
                return _to(delivery, ObserveAnswer(answer), answer=answer)
            return _answered(dataclasses.replace(delivery, answer=answer))
        case ObserveAnswer(), LifecycleDone():
            return _answered(delivery)
        case Prepare(executor_started_at_ms=started_at), Prepared():
            return _prepared(delivery, answer, started_at)
        case Prepare(), PreparationFailed(code=code):
            return _to(delivery, WriteEvent(PrepareFailed(failure_code(code))))
        case StartExecutor(), Launched(handle=handle):
            if not isinstance(handle, str) or not handle:
                return _to(delivery, WriteEvent(LaunchOutcomeUnknown()))
            event = HandleReturned(handle, delivery.log_artifact_id)
            return _to(delivery, WriteEvent(event))
        case StartExecutor(), LaunchDeclined(code=code):
            return _to(delivery, WriteEvent(StartRefused(failure_code(code))))
        case StartExecutor(), LaunchUnknown():
            # Ambiguous: the command may run; never retried (§3.5 decision).
            return _to(delivery, WriteEvent(LaunchOutcomeUnknown()))
    raise ValueError(f"receiver: {type(answer).__name__} does not answer {pending!r}")


def _decide(delivery: Delivery, existing: JournalRecord | None, clock_ms: int) -> Next:
    """§3.8 before any write; then publish, merge, or continue with the record's state."""
    assert delivery.offer is not None
    assert delivery.session is not None
    decision = decide_delivery(
        delivery.offer,
        existing,
        delivery.session,
        records_held=0,
        capacity=delivery.capacity,
        observed_at_ms=observation_ms(existing, clock_ms),
    )
    if isinstance(decision, Rejected):
        return _finish(delivery, ResultKind.REJECTED, decision.code)
    if isinstance(decision, Accept):
        return _to(delivery, Publish(decision.offer))
    found = dataclasses.replace(delivery, record=existing, found=True)
    if isinstance(decision, Merge):
        return _to(found, WriteEvent(decision.event))
    return _continue(found, clock_ms)


def _written(
    delivery: Delivery, pending: Publish | WriteEvent, record: JournalRecord, clock_ms: int
) -> Next:
    merge = isinstance(pending, WriteEvent) and isinstance(pending.event, LeaseVersionAdvanced)
    barrier = isinstance(pending, WriteEvent) and isinstance(pending.event, PrepareSucceeded)
    now = dataclasses.replace(
        delivery,
        record=record,
        reached=delivery.reached or not merge,
        barrier=delivery.barrier or barrier,
    )
    if delivery.stage is _Stage.FAIL_START_MERGE:
        return _ask(dataclasses.replace(now, stage=_Stage.PIPELINE), record.offer.lease)
    if record.state in FINAL_STATES and not now.untracked:
        return _to(now, UntrackLease())
    return _continue(now, clock_ms)


def _continue(delivery: Delivery, clock_ms: int) -> Next:
    """§3.5 step 3: continue with the record's state, by §3.7's `REPLAY` row for it."""
    record = delivery.record
    assert record is not None
    replay = not delivery.reached
    action = REPLAY[record.state]
    if action is ReplayAction.REPLAY_STARTING_ACK:
        return _to(delivery, AskStarting(record.offer.lease), ack=AckKind.STARTING)
    if action is ReplayAction.CONTINUE_FIRST_START:
        if not delivery.tracked:
            return _to(delivery, TrackLease(record.offer.lease))  # step 5
        return _to(delivery, Prepare(observation_ms(record, clock_ms)))
    if action is ReplayAction.JOIN_OR_LAUNCH_UNKNOWN:
        if delivery.barrier:
            return _to(delivery, StartExecutor())
        return _to(delivery, WriteEvent(LaunchOutcomeUnknown()))
    if action is ReplayAction.REPLAY_RUNNING_ACK:
        if replay and not delivery.tracked:
            # A known local execution (after a restart a redelivery is how the lease comes
            # back): keep renewing it.
            return _to(delivery, TrackLease(record.offer.lease))
        return _running_ack(delivery)
    if action is ReplayAction.IDEMPOTENT_SUCCESS:
        if replay and not delivery.tracked:
            return _to(delivery, TrackLease(record.offer.lease))
        if replay:
            return _finish(delivery, ResultKind.REPLAYED, Code.ALREADY_APPLIED)
        return _finish(delivery, ResultKind.APPLIED, delivery.code)
    if action is ReplayAction.REPLAY_FAIL_START:
        return _fail_start(delivery)
    return _finish(delivery, *_replayed(action, record, replay, delivery.code))


def _replayed(
    action: ReplayAction, record: JournalRecord, replay: bool, code: Code
) -> tuple[ResultKind, Code]:
    """The answer of a record whose state ends the pipeline."""
    if action is ReplayAction.REPLAYED_COMPLETED:
        kind = ResultKind.REPLAYED if replay else ResultKind.APPLIED
        return kind, Code.ALREADY_TERMINAL
    if replay:
        return ResultKind.REPLAYED, Code.ALREADY_APPLIED
    if record.recovery_reason is not None:
        return ResultKind.APPLIED, _REACHED_RECOVERY[record.recovery_reason]
    return ResultKind.APPLIED, code


#: The code of a delivery that just wrote `recovery_required(reason)`.
_REACHED_RECOVERY: Final = {
    RecoveryReason.LAUNCH_OUTCOME_UNKNOWN: Code.LAUNCH_OUTCOME_UNKNOWN,
    RecoveryReason.CONTROL_PLANE_ALREADY_RUNNING: Code.ALREADY_RUNNING,
    RecoveryReason.CONTROL_PLANE_TERMINAL: Code.CONTROL_PLANE_TERMINAL,
    RecoveryReason.LEASE_LOST_LOCAL_EXECUTION_STOPPED: Code.APPLIED,
    RecoveryReason.LEASE_LOST_LOCAL_EXECUTION_UNVERIFIED: Code.APPLIED,
}


# -- the ACKs --------------------------------------------------------------------------------------
def _running_ack(delivery: Delivery) -> Next:
    return _to(delivery, HeldLease(), ack=AckKind.RUNNING, tried=frozenset())


def _fail_start(delivery: Delivery) -> Next:
    record = delivery.record
    assert record is not None
    code = record.start_failure_code or Code.START_FAILED.value
    return _to(delivery, HeldLease(), ack=AckKind.FAIL_START, tried=frozenset(), failure=code)


def _held(delivery: Delivery, held: OfferLease | None) -> Next:
    """The lease to send: the lifecycle's (§3.5 step 9), else the record's. After a mismatch
    (`tried` not empty) only a version not tried yet."""
    record = delivery.record
    assert record is not None
    if delivery.tried:
        if held is None or held.version in delivery.tried:
            return _stop(delivery, Code.LEASE_VERSION_MISMATCH)
        candidate = held
    else:
        candidate = held or record.offer.lease
    delivery = dataclasses.replace(delivery, candidate=candidate)
    if delivery.ack is AckKind.FAIL_START and candidate.version > record.offer.lease.version:
        # T5's exact replay needs the version it was sent with: merge the newer one first, so
        # a restart that replays from the record alone sends the identical command (WR-10).
        merge = LeaseVersionAdvanced(candidate, record.offer.delivery_kind)
        return _to(delivery, WriteEvent(merge), stage=_Stage.FAIL_START_MERGE)
    lease = record.offer.lease if delivery.ack is AckKind.FAIL_START else candidate
    return _ask(delivery, lease)


def _ask(delivery: Delivery, lease: OfferLease) -> Next:
    record = delivery.record
    assert record is not None
    assert delivery.candidate is not None
    tried = delivery.tried | {delivery.candidate.version}
    if delivery.ack is AckKind.FAIL_START:
        step: ReceiverStep = AskFailStart(lease, delivery.failure or Code.START_FAILED.value)
    else:
        handle, started_at = record.executor_handle, record.executor_started_at_ms
        assert handle is not None  # §3.3: required in `started`
        assert started_at is not None
        step = AskRunning(lease, handle, started_at)
    return _to(delivery, step, tried=tried)


def _answered(delivery: Delivery) -> Next:
    """The control plane's answer, as `ACK_ANSWERS` maps it to a journal event; a version
    mismatch on the running or failure ACK refreshes the version and retries (INBOX-14)."""
    answer, kind, record = delivery.answer, delivery.ack, delivery.record
    assert answer is not None
    assert kind is not None
    assert record is not None
    if answer.code is Code.LEASE_VERSION_MISMATCH and kind in VERSION_RETRIED:
        if len(delivery.tried) >= ACK_VERSION_TRIES:
            return _stop(delivery, Code.ACK_VERSION_RETRIES_EXHAUSTED)
        return _to(delivery, HeldLease())
    trigger = ACK_ANSWERS[kind].get(answer.code)
    if trigger is None:
        return _stop(delivery, answer.code)
    event: JournalEvent
    if trigger is JournalTrigger.STARTING_ACKNOWLEDGED:
        event = StartingAcknowledged(answer.lease_after(record.offer.lease))
    elif trigger is JournalTrigger.CONTROL_PLANE_ALREADY_RUNNING:
        event = ControlPlaneAlreadyRunning()
    elif trigger is JournalTrigger.CONTROL_PLANE_TERMINAL:
        event = ControlPlaneTerminal()
    elif trigger is JournalTrigger.RUNNING_ACKNOWLEDGED:
        event = RunningAcknowledged()
    else:
        event = FailStartAcknowledged()
    return _to(delivery, WriteEvent(event), code=answer.code)


def _prepared(delivery: Delivery, context: Prepared, started_at: int) -> Next:
    """§3.5 step 7: the factory's context must be for this record and this start time, with a
    callback sequence >= 1 and a token; then the barrier carries the pair's digest."""
    record = delivery.record
    assert record is not None
    lease = record.offer.lease
    sequence, token = context.callback_sequence, context.callback_token
    valid = (
        context.offer_id == record.offer_id
        and context.run_id == lease.run_id
        and context.attempt_id == lease.attempt_id
        and context.executor_started_at_ms == started_at
        and type(sequence) is int
        and sequence >= 1
        and isinstance(token, Secret)
    )
    if not valid:
        return _to(delivery, WriteEvent(PrepareFailed(Code.PREPARE_FAILED.value)))
    assert isinstance(token, Secret)
    assert isinstance(sequence, int)
    try:
        digest = token_digest(token.reveal())
    except IdentityError:
        return _to(delivery, WriteEvent(PrepareFailed(Code.PREPARE_FAILED.value)))
    barrier = PrepareSucceeded(
        callback_sequence=sequence,
        callback_token_sha256=digest,
        executor_started_at_ms=started_at,
        log_artifact_id=context.log_artifact_id,
    )
    return _to(delivery, WriteEvent(barrier), log_artifact_id=context.log_artifact_id)
