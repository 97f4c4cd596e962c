"""The Worker's recovery Reconciler (SPEC §3.11): evidence order, authority and submission."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.entities import WorkerSession
from kernel.specs.codes import Code
from kernel.specs.states import AttemptStatus, CompletionOutcome, WorkerSessionStatus
from kernel.worker.journal import JournalApplied, journal_step
from kernel.worker.reconciler import (
    CompletionObserved,
    Concluded,
    ControlPlaneView,
    HandleInspection,
    InboxEvidence,
    Inspect,
    ReadReceipt,
    ReceiptCheck,
    ReceiptFacts,
    RunningObserved,
    Submission,
    TerminalFacts,
    UnknownInboxReason,
    UnknownObserved,
    WaitGrace,
    after_grace,
    after_inspection,
    after_receipt,
    authority,
    completion_submission,
    first_step,
)
from kernel.worker.record import JournalRecord
from tests.support.journal_fixtures import PIPELINE, T0, accepted

FACTS = ReceiptFacts(1, T0 + 500, 0, CompletionOutcome.SUCCEEDED)


def _at(n: int) -> JournalRecord:
    record = accepted()
    for i, event in enumerate(PIPELINE[:n]):
        outcome = journal_step(record, event, T0 + i + 1)
        assert isinstance(outcome, JournalApplied)
        assert outcome.record is not None
        record = outcome.record
    return record


def run(
    record: JournalRecord, reads: list[ReceiptCheck], inspection: HandleInspection | None
) -> tuple[InboxEvidence, list[str]]:
    """Drive the step machine with scripted port answers; return the evidence and the calls
    made, in order (`read`, `inspect`, `wait`)."""
    calls: list[str] = []
    step = first_step()
    answers = iter(reads)
    while not isinstance(step, Concluded):
        if isinstance(step, ReadReceipt):
            calls.append("read")
            check = next(answers)
            step = after_receipt(
                record, step.phase, check, FACTS if check is ReceiptCheck.VALID else None
            )
        elif isinstance(step, Inspect):
            calls.append("inspect")
            assert inspection is not None
            step = after_inspection(inspection)
        else:
            assert isinstance(step, WaitGrace)
            calls.append("wait")
            step = after_grace()
    return step.evidence, calls


@pytest.mark.spec("INBOX-29")
def test_a_valid_receipt_means_no_probe_and_exited_rereads_twice() -> None:
    """INBOX-29: with a valid receipt no process probe happens; after `exited` the receipt is
    re-read at once, and once more after the grace."""
    started = _at(3)
    evidence, calls = run(started, [ReceiptCheck.VALID], None)
    assert evidence == CompletionObserved(FACTS)
    assert calls == ["read"]
    evidence, calls = run(
        started, [ReceiptCheck.ABSENT, ReceiptCheck.VALID], HandleInspection.EXITED
    )
    assert evidence == CompletionObserved(FACTS)
    assert calls == ["read", "inspect", "read"]
    evidence, calls = run(
        started,
        [ReceiptCheck.ABSENT, ReceiptCheck.ABSENT, ReceiptCheck.VALID],
        HandleInspection.EXITED,
    )
    assert evidence == CompletionObserved(FACTS)
    assert calls == ["read", "inspect", "read", "wait", "read"]
    evidence, calls = run(started, [ReceiptCheck.ABSENT] * 3, HandleInspection.EXITED)
    assert evidence == UnknownObserved(UnknownInboxReason.EXITED_WITHOUT_RECEIPT)
    assert calls == ["read", "inspect", "read", "wait", "read"]


@pytest.mark.spec("INBOX-30")
@pytest.mark.parametrize(
    ("check", "reason"),
    [
        (ReceiptCheck.CONFLICT, UnknownInboxReason.RECEIPT_CONFLICT),
        (ReceiptCheck.UNAUTHENTICATED, UnknownInboxReason.RECEIPT_UNAUTHENTICATED),
        (ReceiptCheck.AUTHENTICATOR_UNAVAILABLE, UnknownInboxReason.AUTHENTICATOR_UNAVAILABLE),
        (ReceiptCheck.READ_FAILED, UnknownInboxReason.RECEIPT_READ_FAILED),
    ],
)
def test_a_bad_or_unreadable_receipt_is_unknown_before_any_probe(
    check: ReceiptCheck, reason: UnknownInboxReason
) -> None:
    """INBOX-30: a receipt mismatch, an unavailable authenticator or a read error yields
    `unknown` before any process probe, in the first read and in the re-reads."""
    evidence, calls = run(_at(3), [check], HandleInspection.RUNNING)
    assert evidence == UnknownObserved(reason)
    assert calls == ["read"]
    evidence, calls = run(_at(3), [ReceiptCheck.ABSENT, check], HandleInspection.EXITED)
    assert evidence == UnknownObserved(reason)
    assert calls == ["read", "inspect", "read"]


@pytest.mark.spec("INBOX-31")
def test_a_record_without_the_callback_pair_never_authenticates_a_receipt() -> None:
    legacy = dataclasses.replace(_at(3), callback_sequence=None, callback_token_sha256=None)
    evidence, calls = run(legacy, [ReceiptCheck.VALID], None)
    assert evidence == UnknownObserved(UnknownInboxReason.RECEIPT_UNAUTHENTICATED)
    assert calls == ["read"]


@pytest.mark.spec("INBOX-32")
@pytest.mark.parametrize(
    ("inspection", "expected"),
    [
        (HandleInspection.RUNNING, RunningObserved()),
        (HandleInspection.INVALID, UnknownObserved(UnknownInboxReason.HANDLE_INVALID)),
        (HandleInspection.IDENTITY_MISMATCH, UnknownObserved(UnknownInboxReason.IDENTITY_MISMATCH)),
        (HandleInspection.UNSUPPORTED, UnknownObserved(UnknownInboxReason.UNSUPPORTED)),
        (HandleInspection.PROBE_FAILED, UnknownObserved(UnknownInboxReason.PROBE_FAILED)),
    ],
)
def test_each_inspection_maps_to_one_evidence_and_no_side_effect(
    inspection: HandleInspection, expected: InboxEvidence
) -> None:
    """INBOX-32: one stable evidence value per inspector outcome; the only steps the machine
    ever asks for are reads, one inspection and one wait (no start, stop, ACK or remove)."""
    evidence, calls = run(_at(3), [ReceiptCheck.ABSENT], inspection)
    assert evidence == expected
    assert set(calls) <= {"read", "inspect", "wait"}
    launching = _at(2)  # no durable handle yet
    evidence, calls = run(launching, [ReceiptCheck.ABSENT], inspection)
    assert evidence == UnknownObserved(UnknownInboxReason.HANDLE_MISSING)
    assert calls == ["read"]


def _runtime(**changes: object) -> WorkerSession:
    base = WorkerSession("w1", "s1", 1, WorkerSessionStatus.ONLINE, T0 + 10**9, ("shell",))
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


@pytest.mark.spec("INBOX-33")
def test_authority_precedence_and_blocked_submissions() -> None:
    """INBOX-33: with authority `session_fenced`, `worker_offline`, `worker_session_expired` or
    `run_lease_expired`, or a terminal control plane, a completion is blocked; the exact-replay
    case is ready."""
    record = _at(3)
    now = T0 + 100
    assert authority(record, _runtime(), now) is Code.CURRENT
    fenced = _runtime(session_id="s2", status=WorkerSessionStatus.OFFLINE)
    assert authority(record, fenced, now) is Code.SESSION_FENCED  # precedence
    offline = _runtime(status=WorkerSessionStatus.OFFLINE, session_expires_at_ms=0)
    assert authority(record, offline, now) is Code.WORKER_OFFLINE_AUTHORITY
    assert authority(record, _runtime(session_expires_at_ms=now), now) is (
        Code.WORKER_SESSION_EXPIRED_AUTHORITY
    )
    assert authority(record, _runtime(), T0 + 30_000) is Code.RUN_LEASE_EXPIRED_AUTHORITY

    done = CompletionObserved(FACTS)
    assert completion_submission(done, Code.CURRENT, None) == Submission(ready=True)
    for value in (
        Code.SESSION_FENCED,
        Code.WORKER_OFFLINE_AUTHORITY,
        Code.WORKER_SESSION_EXPIRED_AUTHORITY,
        Code.RUN_LEASE_EXPIRED_AUTHORITY,
    ):
        assert completion_submission(done, value, None) == Submission(False, value)
    terminal = ControlPlaneView(terminal=True)
    assert completion_submission(done, Code.CURRENT, terminal) == Submission(
        False, Code.CONTROL_PLANE_TERMINAL
    )
    same = TerminalFacts(AttemptStatus.SUCCEEDED, FACTS.callback_sequence, FACTS.exit_code)
    replay = ControlPlaneView(
        True, completed_by_record_fences_at_next_version=True, completion=same
    )
    assert completion_submission(done, Code.SESSION_FENCED, replay) == Submission(ready=True)
    unknown_facts = ControlPlaneView(True, completed_by_record_fences_at_next_version=True)
    assert completion_submission(done, Code.SESSION_FENCED, unknown_facts) == Submission(
        False, Code.CONTROL_PLANE_TERMINAL
    )  # E-3: a replay only with the control plane's facts equal to the receipt's
    assert completion_submission(RunningObserved(), Code.CURRENT, None) is None


@given(
    st.lists(st.sampled_from(list(ReceiptCheck)), min_size=3, max_size=3),
    st.sampled_from(list(HandleInspection)),
)
def test_the_machine_always_ends_within_three_reads_one_probe_and_one_wait(
    reads: list[ReceiptCheck], inspection: HandleInspection
) -> None:
    evidence, calls = run(_at(3), reads, inspection)
    assert calls.count("read") <= 3
    assert calls.count("inspect") <= 1
    assert calls.count("wait") <= 1
    if calls.count("inspect"):
        assert calls[0] == "read"  # receipt before identity (O-8)
    assert isinstance(evidence, CompletionObserved | RunningObserved | UnknownObserved)
