"""The receiver's step machine (SPEC §3.5, §3.7; `kernel.worker.receiver`), driven with any
answers the ports could give.

A Hypothesis driver answers every step `begin` / `advance` names with an answer of the right
kind drawn at random (a record found in any reachable state, writes that succeed as the kernel's
`journal_step` says or fail, control-plane answers with any code and version, an unreachable
control plane, prepare and start outcomes). Whatever the answers, the machine ends, and:

- `StartExecutor` is named at most once, and only right after the `launching` revision this
  very operation wrote is durable (INBOX-03, INBOX-04, I-J2);
- a record found in `launching` or later is never prepared nor started (INBOX-05, INBOX-06,
  INBOX-08), and a `launching` record found is written `recovery_required(launch_outcome_unknown)`;
- a running or failure ACK is sent at most `ACK_VERSION_TRIES` times (INBOX-14);
- a delivery refused by validation has written nothing (INBOX-09, INBOX-11).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import Secret
from kernel.entities import WorkerSession
from kernel.specs.codes import Code
from kernel.specs.journal import JournalState
from kernel.specs.states import WorkerSessionStatus
from kernel.worker.journal import (
    DeliveryAccepted,
    Found,
    JournalApplied,
    LaunchOutcomeUnknown,
    PrepareSucceeded,
    ReadFailed,
    StartingAcknowledged,
    WriteFailed,
    Written,
    journal_step,
)
from kernel.worker.receiver import (
    ACK_VERSION_TRIES,
    AskFailStart,
    AskRunning,
    AskStarting,
    Delivery,
    FinishDelivery,
    Held,
    HeldLease,
    LaunchDeclined,
    Launched,
    LaunchUnknown,
    LifecycleDone,
    ObserveAnswer,
    PreparationFailed,
    Prepare,
    Prepared,
    Publish,
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
)
from kernel.worker.record import JournalRecord, LeaseAck
from tests.support.journal_fixtures import T0, accepted, events, lease, offer

NOW = T0 + 1_000
STEP_BOUND = 64
CODES = (
    Code.APPLIED,
    Code.ALREADY_APPLIED,
    Code.ALREADY_RUNNING,
    Code.ALREADY_TERMINAL,
    Code.LEASE_VERSION_MISMATCH,
    Code.LEASE_TOKEN_MISMATCH,
    Code.COMPLETED,
)
NOT_FIRST_START = frozenset(JournalState) - {
    JournalState.ACCEPTED,
    JournalState.STARTING_ACKNOWLEDGED,
}


def _session() -> WorkerSession:
    return WorkerSession("w1", "s1", 1, WorkerSessionStatus.ONLINE, T0 + 10**9, ("shell",))


@st.composite
def found_records(draw: st.DrawFn) -> JournalRecord | None:
    """None, or a record of the fixture offer reached by any walk of §3.6 steps."""
    if draw(st.booleans()):
        return None
    record = accepted()
    for event in draw(st.lists(events(), max_size=8)):
        outcome = journal_step(record, event, record.updated_at_ms + 1)
        if isinstance(outcome, JournalApplied) and outcome.record is not None:
            record = outcome.record
    return record


def _answer(
    data: st.DataObject, delivery: Delivery, step: ReceiverStep, found: JournalRecord | None
) -> ReceiverAnswer:
    record = delivery.record
    match step:
        case ReadRecord():
            return (
                Found(found) if data.draw(st.integers(0, 9)) else ReadFailed(Code.JOURNAL_CORRUPT)
            )
        case Publish(offer=published):
            made = journal_step(None, DeliveryAccepted(published), NOW)
            assert isinstance(made, JournalApplied)
            assert made.record is not None
            return (
                Written(made.record) if data.draw(st.booleans()) else WriteFailed(Code.JOURNAL_FULL)
            )
        case WriteEvent(event=event):
            assert record is not None
            if not data.draw(st.integers(0, 4)):
                return WriteFailed(Code.JOURNAL_REVISION_CONFLICT)
            outcome = journal_step(record, event, max(NOW, record.updated_at_ms))
            if isinstance(outcome, JournalApplied):
                assert outcome.record is not None
                return Written(outcome.record)
            if outcome.code is Code.ALREADY_APPLIED:
                return Written(record)
            return WriteFailed(outcome.code, refused=True)
        case AskStarting() | AskRunning() | AskFailStart():
            if not data.draw(st.integers(0, 7)):
                return Unreachable()
            version = data.draw(st.one_of(st.none(), st.integers(1, 9)))
            code = data.draw(st.sampled_from(CODES))
            return LeaseAck(code, version, None if version is None else T0 + 60_000)
        case TrackLease() | UntrackLease() | ObserveAnswer():
            return LifecycleDone()
        case HeldLease():
            version = data.draw(st.one_of(st.none(), st.integers(1, 9)))
            return Held(None if version is None else lease(version=version))
        case Prepare(executor_started_at_ms=started_at):
            assert record is not None
            if not data.draw(st.integers(0, 4)):
                return PreparationFailed("PREPARE_FAILED")
            return Prepared(
                offer_id=record.offer_id,
                run_id=record.offer.lease.run_id,
                attempt_id=record.offer.lease.attempt_id,
                callback_sequence=data.draw(st.sampled_from([1, 1, 1, 0])),
                callback_token=Secret.of("a-callback-token-0123456789abcdef", "callback_token"),
                executor_started_at_ms=started_at,
            )
        case StartExecutor():
            outcomes: list[ReceiverAnswer] = [
                Launched("posix:v1:boot:1:2"),
                Launched(""),
                LaunchDeclined("X"),
                LaunchUnknown(),
            ]
            return data.draw(st.sampled_from(outcomes))
    raise AssertionError(f"no answer for {step!r}")


@pytest.mark.spec("INBOX-03", "INBOX-04", "INBOX-05", "INBOX-06", "INBOX-08", "INBOX-14")
@given(found=found_records(), data=st.data())
def test_whatever_the_ports_answer_the_executor_starts_only_behind_its_own_barrier(
    found: JournalRecord | None, data: st.DataObject
) -> None:
    delivery, step = begin(offer(), _session(), capacity=64)
    steps: list[ReceiverStep] = [step]
    answers: list[ReceiverAnswer] = []
    for _ in range(STEP_BOUND):
        if isinstance(step, FinishDelivery):
            break
        answer = _answer(data, delivery, step, found)
        answers.append(answer)
        delivery, step = advance(delivery, answer, NOW)
        steps.append(step)
    assert isinstance(step, FinishDelivery), "the receiver ends within the step bound"

    starts = [i for i, s in enumerate(steps) if isinstance(s, StartExecutor)]
    assert len(starts) <= 1  # I-J1 within one operation
    for i in starts:
        barrier = steps[i - 1]
        assert isinstance(barrier, WriteEvent)
        assert isinstance(barrier.event, PrepareSucceeded)
        assert isinstance(answers[i - 1], Written)  # durable before start() (I-J2, INBOX-03)

    if found is not None and found.state in NOT_FIRST_START:
        assert not any(isinstance(s, Prepare | StartExecutor) for s in steps)
        if found.state is JournalState.LAUNCHING:
            # INBOX-05: unless the read failed or validation refused, the found `launching`
            # record is written `recovery_required(launch_outcome_unknown)`.
            written = [s for s in steps if isinstance(s, WriteEvent)]
            assert all(isinstance(s.event, LaunchOutcomeUnknown) for s in written[-1:])

    for kind in (AskRunning, AskFailStart):
        assert sum(isinstance(s, kind) for s in steps) <= ACK_VERSION_TRIES  # INBOX-14

    if step.kind is ResultKind.REJECTED:
        wrote = any(
            isinstance(s, WriteEvent) and isinstance(a, Written)
            for s, a in zip(steps, answers, strict=False)
        )
        assert not wrote  # a refusal writes nothing (INBOX-09, INBOX-11)


@pytest.mark.spec("INBOX-05")
def test_a_found_launching_record_is_never_started() -> None:
    """The directed case of the property: a redelivery finds `launching` (no operation in
    flight): the only write is `recovery_required(launch_outcome_unknown)`."""
    record = accepted()
    for event in (
        StartingAcknowledged(lease(version=3)),
        PrepareSucceeded(1, "a" * 64, T0 + 5),
    ):
        outcome = journal_step(record, event, record.updated_at_ms + 1)
        assert isinstance(outcome, JournalApplied)
        assert outcome.record is not None
        record = outcome.record
    assert record.state is JournalState.LAUNCHING
    delivery, step = begin(offer(), _session(), capacity=64)
    delivery, step = advance(delivery, Found(record), NOW)
    assert step == WriteEvent(LaunchOutcomeUnknown())
    outcome = journal_step(record, LaunchOutcomeUnknown(), NOW)
    assert isinstance(outcome, JournalApplied)
    assert outcome.record is not None
    delivery, step = advance(delivery, Written(outcome.record), NOW)
    assert step == FinishDelivery(ResultKind.APPLIED, Code.LAUNCH_OUTCOME_UNKNOWN)
