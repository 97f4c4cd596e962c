"""The offer journal state machine (SPEC §3.3-§3.7, §3.10 U-4): the tables restated from the
SPEC text, and property tests over random event sequences from a first delivery."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import Secret
from kernel.outcomes import Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.journal import (
    AUDIT_CLASSIFICATION,
    FINAL_STATES,
    JOURNAL_TABLE,
    LEASE_LOST_REASONS,
    MAY_SPAWN,
    REPLAY,
    RETENTION_ELIGIBLE,
    TRIGGER_REASONS,
    AuditClass,
    DeliveryKind,
    JournalState,
    JournalTrigger,
    RecoveryReason,
    ReplayAction,
)
from kernel.worker.journal import (
    CompletionAcknowledged,
    ControlPlaneAlreadyRunning,
    ControlPlaneTerminal,
    DeliveryAccepted,
    HandleReturned,
    JournalApplied,
    JournalEvent,
    JournalOutcome,
    LaunchOutcomeUnknown,
    LeaseLost,
    LeaseVersionAdvanced,
    PrepareSucceeded,
    RetentionDelete,
    StartingAcknowledged,
    StartRefused,
    journal_step,
)
from kernel.worker.record import JournalRecord, record_violations
from tests.support.journal_fixtures import (
    CALLBACK_DIGEST,
    CALLBACK_TOKEN,
    LEASE_TOKEN,
    PIPELINE,
    T0,
    accepted,
    events,
    lease,
    offer,
)

# §3.6 as the SPEC writes it, row by row (source states, trigger, target, reasons).
SPEC_ROWS: list[
    tuple[
        tuple[JournalState | None, ...],
        JournalTrigger,
        JournalState | None,
        frozenset[RecoveryReason],
    ]
] = [
    ((None,), JournalTrigger.DELIVERY_ACCEPTED, JournalState.ACCEPTED, frozenset()),
    (
        (JournalState.ACCEPTED,),
        JournalTrigger.STARTING_ACKNOWLEDGED,
        JournalState.STARTING_ACKNOWLEDGED,
        frozenset(),
    ),
    (
        (JournalState.ACCEPTED,),
        JournalTrigger.CONTROL_PLANE_ALREADY_RUNNING,
        JournalState.RECOVERY_REQUIRED,
        frozenset({RecoveryReason.CONTROL_PLANE_ALREADY_RUNNING}),
    ),
    (
        (JournalState.ACCEPTED, JournalState.STARTED),
        JournalTrigger.CONTROL_PLANE_TERMINAL,
        JournalState.RECOVERY_REQUIRED,
        frozenset({RecoveryReason.CONTROL_PLANE_TERMINAL}),
    ),
    (
        (JournalState.STARTING_ACKNOWLEDGED,),
        JournalTrigger.PREPARE_SUCCEEDED,
        JournalState.LAUNCHING,
        frozenset(),
    ),
    (
        (JournalState.STARTING_ACKNOWLEDGED,),
        JournalTrigger.PREPARE_FAILED,
        JournalState.START_FAILED,
        frozenset(),
    ),
    ((JournalState.LAUNCHING,), JournalTrigger.HANDLE_RETURNED, JournalState.STARTED, frozenset()),
    (
        (JournalState.LAUNCHING,),
        JournalTrigger.START_REFUSED,
        JournalState.START_FAILED,
        frozenset(),
    ),
    (
        (JournalState.LAUNCHING,),
        JournalTrigger.LAUNCH_OUTCOME_UNKNOWN,
        JournalState.RECOVERY_REQUIRED,
        frozenset({RecoveryReason.LAUNCH_OUTCOME_UNKNOWN}),
    ),
    (
        (JournalState.STARTED,),
        JournalTrigger.RUNNING_ACKNOWLEDGED,
        JournalState.RUNNING_ACKNOWLEDGED,
        frozenset(),
    ),
    (
        (JournalState.START_FAILED,),
        JournalTrigger.FAIL_START_ACKNOWLEDGED,
        JournalState.START_FAILURE_ACKNOWLEDGED,
        frozenset(),
    ),
    (
        (
            JournalState.LAUNCHING,
            JournalState.STARTED,
            JournalState.RUNNING_ACKNOWLEDGED,
            JournalState.RECOVERY_REQUIRED,
        ),
        JournalTrigger.COMPLETION_ACKNOWLEDGED,
        JournalState.COMPLETION_ACKNOWLEDGED,
        frozenset(),
    ),
    (
        (
            JournalState.LAUNCHING,
            JournalState.STARTED,
            JournalState.RUNNING_ACKNOWLEDGED,
            JournalState.RECOVERY_REQUIRED,
        ),
        JournalTrigger.LEASE_LOST,
        JournalState.RECOVERY_REQUIRED,
        frozenset(
            {
                RecoveryReason.LEASE_LOST_LOCAL_EXECUTION_STOPPED,
                RecoveryReason.LEASE_LOST_LOCAL_EXECUTION_UNVERIFIED,
            }
        ),
    ),
    (
        (JournalState.COMPLETION_ACKNOWLEDGED, JournalState.START_FAILURE_ACKNOWLEDGED),
        JournalTrigger.RETENTION_DELETE,
        None,
        frozenset(),
    ),
]


@pytest.mark.spec("INBOX-01")
def test_the_transition_table_is_the_spec_table() -> None:
    """INBOX-01 (the data): the table holds exactly the rows of §3.6, plus "any non-final
    state keeps its state when the lease version advances"."""
    expected: dict[
        tuple[JournalState | None, JournalTrigger],
        tuple[JournalState | None, frozenset[RecoveryReason]],
    ] = {}
    for sources, trigger, target, reasons in SPEC_ROWS:
        for source in sources:
            expected[(source, trigger)] = (target, reasons)
    for state in JournalState:
        if state not in FINAL_STATES:
            expected[(state, JournalTrigger.LEASE_VERSION_ADVANCED)] = (state, frozenset())
    actual = {
        (edge.source, edge.trigger): (edge.target, TRIGGER_REASONS.get(edge.trigger, frozenset()))
        for edge in JOURNAL_TABLE.edges()
    }
    assert actual == expected
    assert len(JOURNAL_TABLE.edges()) == len(expected)  # one target per row
    assert {
        JournalState.START_FAILURE_ACKNOWLEDGED,
        JournalState.COMPLETION_ACKNOWLEDGED,
    } == FINAL_STATES


@pytest.mark.spec("INBOX-25")
def test_every_state_and_reason_is_classified_as_u4() -> None:
    """INBOX-25: U-4, one class per state, the same for every recovery reason."""
    assert dict(AUDIT_CLASSIFICATION) == {
        JournalState.ACCEPTED: AuditClass.NO_LOCAL_EXECUTION,
        JournalState.STARTING_ACKNOWLEDGED: AuditClass.NO_LOCAL_EXECUTION,
        JournalState.START_FAILED: AuditClass.NO_LOCAL_EXECUTION,
        JournalState.START_FAILURE_ACKNOWLEDGED: AuditClass.SETTLED_START_FAILURE,
        JournalState.COMPLETION_ACKNOWLEDGED: AuditClass.SETTLED_COMPLETION,
        JournalState.LAUNCHING: AuditClass.LAUNCH_RECONCILIATION,
        JournalState.RECOVERY_REQUIRED: AuditClass.LAUNCH_RECONCILIATION,
        JournalState.STARTED: AuditClass.EXECUTION_RECONCILIATION,
        JournalState.RUNNING_ACKNOWLEDGED: AuditClass.EXECUTION_RECONCILIATION,
    }
    assert set(AUDIT_CLASSIFICATION) == set(JournalState)


@pytest.mark.spec("INBOX-05", "INBOX-06", "INBOX-07", "INBOX-08")
def test_replay_semantics_never_start_twice() -> None:
    """§3.7: `launching` found -> join or `launch_outcome_unknown`, never the Executor
    (INBOX-05); `started` -> only the running ACK (INBOX-06); `running_acknowledged` ->
    idempotent success, never retention-eligible (INBOX-07); `start_failed` -> only
    `fail_start` (INBOX-08). Only the two states before `launching` may ever lead to a spawn."""
    assert REPLAY[JournalState.LAUNCHING] is ReplayAction.JOIN_OR_LAUNCH_UNKNOWN
    assert REPLAY[JournalState.STARTED] is ReplayAction.REPLAY_RUNNING_ACK
    assert REPLAY[JournalState.RUNNING_ACKNOWLEDGED] is ReplayAction.IDEMPOTENT_SUCCESS
    assert REPLAY[JournalState.START_FAILED] is ReplayAction.REPLAY_FAIL_START
    assert set(REPLAY) == set(JournalState)
    spawning = {s for s, action in REPLAY.items() if action in MAY_SPAWN}
    assert spawning == {JournalState.ACCEPTED, JournalState.STARTING_ACKNOWLEDGED}
    assert JournalState.RUNNING_ACKNOWLEDGED not in RETENTION_ELIGIBLE
    assert JournalState.RECOVERY_REQUIRED not in RETENTION_ELIGIBLE


def _walk(
    events_: list[JournalEvent],
) -> list[tuple[JournalRecord, JournalEvent, JournalOutcome]]:
    """Apply events from a first delivery, one observation time step each; keep going past
    refusals (they write nothing). Returns (record before, event, outcome) per step."""
    record: JournalRecord | None = accepted()
    steps: list[tuple[JournalRecord, JournalEvent, JournalOutcome]] = []
    for i, event in enumerate(events_):
        if record is None:
            break
        outcome = journal_step(record, event, T0 + 10 * (i + 1))
        steps.append((record, event, outcome))
        if isinstance(outcome, JournalApplied):
            record = outcome.record
    return steps


@pytest.mark.spec("INBOX-01")
@given(st.lists(events(), max_size=25))
def test_only_the_table_transitions_ever_apply(sequence: list[JournalEvent]) -> None:
    """INBOX-01: from any reachable record, an event applies only if (state, trigger) is a
    row of §3.6 and lands where the row says; every other pair is
    `Rejected(JOURNAL_TRANSITION_INVALID)` and writes nothing."""
    for before, event, outcome in _walk(sequence):
        targets = JOURNAL_TABLE.lookup(before.state, event.trigger)
        if targets is None:
            assert outcome == Rejected(Code.JOURNAL_TRANSITION_INVALID)
            continue
        if isinstance(outcome, JournalApplied):
            if outcome.record is None:
                assert None in targets  # retention
                continue
            assert outcome.record.state in targets
            reasons = TRIGGER_REASONS.get(event.trigger)
            if reasons:
                assert outcome.record.recovery_reason in reasons
        else:
            assert isinstance(outcome, Rejected | Replayed)


@pytest.mark.spec("INBOX-02", "INBOX-03")
@given(st.lists(events(), max_size=25))
def test_every_revision_is_well_formed_and_grows_by_one(sequence: list[JournalEvent]) -> None:
    """INBOX-02: every revision satisfies §3.3 and is the previous one + 1; final states move
    only by deletion. INBOX-03: from `launching` on the callback pair is durable; the record
    holds only the digest (no raw callback token anywhere in it)."""
    for before, _event, outcome in _walk(sequence):
        assert record_violations(before) == ()
        if not isinstance(outcome, JournalApplied) or outcome.record is None:
            continue
        after = outcome.record
        assert record_violations(after) == ()
        assert after.revision == before.revision + 1
        assert before.state not in FINAL_STATES
        if after.state is JournalState.LAUNCHING:
            assert after.has_callback_pair
            assert after.executor_started_at_ms is not None
        assert CALLBACK_TOKEN not in repr(after)
        assert LEASE_TOKEN.reveal() not in repr(after)


def _through(n: int) -> JournalRecord:
    record = accepted()
    for i, event in enumerate(PIPELINE[:n]):
        outcome = journal_step(record, event, T0 + i + 1)
        assert isinstance(outcome, JournalApplied), (event, outcome)
        assert outcome.record is not None
        record = outcome.record
    return record


def test_the_happy_pipeline_reaches_completion_acknowledged() -> None:
    states = [_through(n).state for n in range(len(PIPELINE) + 1)]
    assert states == [
        JournalState.ACCEPTED,
        JournalState.STARTING_ACKNOWLEDGED,
        JournalState.LAUNCHING,
        JournalState.STARTED,
        JournalState.RUNNING_ACKNOWLEDGED,
        JournalState.COMPLETION_ACKNOWLEDGED,
    ]
    done = _through(len(PIPELINE))
    assert done.completion_acknowledged_at_ms == done.updated_at_ms
    assert done.callback_token_sha256 == CALLBACK_DIGEST
    deleted = journal_step(done, RetentionDelete(), done.updated_at_ms)
    assert deleted == JournalApplied(None)


@pytest.mark.spec("INBOX-10")
def test_a_higher_lease_version_replaces_only_the_lease() -> None:
    """INBOX-10: a redelivery with a higher version updates only the stored lease (and the
    delivery kind); an equal or lower version writes nothing."""
    record = _through(3)  # started, lease version 3
    newer = lease(version=5, expires_at_ms=T0 + 90_000)
    outcome = journal_step(
        record, LeaseVersionAdvanced(newer, DeliveryKind.LEASE_RECOVERY), T0 + 100
    )
    assert isinstance(outcome, JournalApplied)
    assert outcome.record is not None
    after = outcome.record
    assert after.offer.lease == newer
    assert after.offer.delivery_kind is DeliveryKind.LEASE_RECOVERY
    unchanged = dataclasses.replace(
        after, revision=record.revision, updated_at_ms=record.updated_at_ms, offer=record.offer
    )
    assert unchanged == record
    for version in (1, 3):
        same = journal_step(
            record, LeaseVersionAdvanced(lease(version=version), DeliveryKind.NEW_CLAIM), T0 + 100
        )
        assert same == Replayed(Code.ALREADY_APPLIED)


@pytest.mark.spec("INBOX-09")
@pytest.mark.parametrize(
    "changed",
    [
        {"worker_session_id": "s2"},
        {"worker_generation": 2},
        {"lease_generation": 2},
        {"token": Secret.of("another-lease-token-0123456789abcdefABCDEF", "lease_token")},
        {"attempt_id": "r1-a2"},
    ],
    ids=["session", "generation", "lease_generation", "token", "attempt"],
)
def test_a_lease_with_other_authority_is_a_conflict(changed: dict[str, object]) -> None:
    """INBOX-09 (the kernel's part): a starting ACK or a redelivery whose lease names another
    session, generation, lease generation, token or Attempt is `Rejected(OFFER_CONFLICT)`."""
    record = accepted()
    token = changed.pop("token", LEASE_TOKEN)
    assert isinstance(token, Secret)
    other = lease(version=9, token=token, **changed)
    assert journal_step(record, StartingAcknowledged(other), T0 + 1) == Rejected(
        Code.OFFER_CONFLICT
    )
    redelivery = LeaseVersionAdvanced(other, DeliveryKind.LEASE_RECOVERY)
    assert journal_step(record, redelivery, T0 + 1) == Rejected(Code.OFFER_CONFLICT)


@pytest.mark.spec("INBOX-13")
def test_a_control_plane_running_or_terminal_attempt_becomes_recovery_required() -> None:
    """INBOX-13: the control plane reports the Attempt running (from `accepted`) or terminal
    (from `accepted` or `started`): `recovery_required` with that reason, a state from which
    no replay spawns."""
    running = journal_step(accepted(), ControlPlaneAlreadyRunning(), T0 + 1)
    assert isinstance(running, JournalApplied)
    assert running.record is not None
    assert running.record.recovery_reason is RecoveryReason.CONTROL_PLANE_ALREADY_RUNNING
    for record in (accepted(), _through(3)):
        terminal = journal_step(record, ControlPlaneTerminal(), T0 + 10)
        assert isinstance(terminal, JournalApplied)
        assert terminal.record is not None
        assert terminal.record.recovery_reason is RecoveryReason.CONTROL_PLANE_TERMINAL
        assert REPLAY[terminal.record.state] not in MAY_SPAWN


@pytest.mark.spec("INBOX-05")
def test_launching_found_on_restart_becomes_launch_outcome_unknown() -> None:
    """INBOX-05: `launching` with no in-process operation -> `recovery_required(
    launch_outcome_unknown)`; nothing in that state can reach the Executor again."""
    launching = _through(2)
    assert launching.state is JournalState.LAUNCHING
    outcome = journal_step(launching, LaunchOutcomeUnknown(), T0 + 50)
    assert isinstance(outcome, JournalApplied)
    assert outcome.record is not None
    assert outcome.record.recovery_reason is RecoveryReason.LAUNCH_OUTCOME_UNKNOWN
    again = journal_step(outcome.record, HandleReturned("posix:v1:x:1:1"), T0 + 60)
    assert again == Rejected(Code.JOURNAL_TRANSITION_INVALID)


def test_a_lease_loss_reason_is_never_overwritten_and_completion_is_final() -> None:
    """§3.6: `recovery_required(lease_lost_*)` takes no second lease-loss reason; a
    completion is never overwritten by a lease-loss reason."""
    lost = journal_step(_through(3), LeaseLost(stopped=True), T0 + 10)
    assert isinstance(lost, JournalApplied)
    assert lost.record is not None
    assert lost.record.recovery_reason in LEASE_LOST_REASONS
    assert journal_step(lost.record, LeaseLost(stopped=False), T0 + 20) == Replayed(
        Code.ALREADY_APPLIED
    )
    done = _through(len(PIPELINE))
    assert journal_step(done, LeaseLost(stopped=True), T0 + 20) == Rejected(
        Code.JOURNAL_TRANSITION_INVALID
    )


def test_times_never_run_backwards_and_bad_payloads_write_nothing() -> None:
    record = _through(1)
    assert journal_step(record, PrepareSucceeded(1, CALLBACK_DIGEST, T0), T0 - 1) == Rejected(
        Code.CLOCK_REGRESSION
    )
    assert journal_step(record, PrepareSucceeded(0, CALLBACK_DIGEST, T0), T0 + 5) == Rejected(
        Code.JOURNAL_TRANSITION_INVALID
    )
    assert journal_step(record, PrepareSucceeded(1, "nothex", T0), T0 + 5) == Rejected(
        Code.JOURNAL_TRANSITION_INVALID
    )
    launching = _through(2)
    assert journal_step(launching, HandleReturned(""), T0 + 5) == Rejected(
        Code.JOURNAL_TRANSITION_INVALID
    )
    refused = journal_step(launching, StartRefused("ENOENT"), T0 + 5)
    assert isinstance(refused, JournalApplied)
    assert refused.record is not None
    assert refused.record.start_failure_code == "ENOENT"
    assert refused.record.executor_started_at_ms == launching.executor_started_at_ms


def test_a_first_delivery_must_carry_the_derived_offer_id() -> None:
    """D-2 at the kernel: a record is only ever created for an offer whose id is derived from
    its lease authority."""
    forged = dataclasses.replace(offer(), offer_id="b" * 64)
    assert journal_step(None, DeliveryAccepted(forged), T0) == Rejected(Code.OFFER_ID_MISMATCH)
    assert journal_step(accepted(), DeliveryAccepted(offer()), T0) == Rejected(
        Code.JOURNAL_TRANSITION_INVALID
    )


def test_a_completion_of_a_record_without_the_pair_needs_the_receipts() -> None:
    """A record without the callback pair (older schema) completes only with the receipt's
    authenticated pair; with a pair, another sequence is stale."""
    running = _through(4)
    assert journal_step(running, CompletionAcknowledged(2, CALLBACK_DIGEST), T0 + 9) == Rejected(
        Code.CALLBACK_SEQUENCE_STALE
    )
    legacy = dataclasses.replace(running, callback_sequence=None, callback_token_sha256=None)
    assert record_violations(legacy) == ()
    assert journal_step(legacy, CompletionAcknowledged(), T0 + 9) == Rejected(
        Code.JOURNAL_TRANSITION_INVALID
    )
    done = journal_step(legacy, CompletionAcknowledged(1, CALLBACK_DIGEST), T0 + 9)
    assert isinstance(done, JournalApplied)
    assert done.record is not None
    assert done.record.has_callback_pair
