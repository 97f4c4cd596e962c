"""The Worker's control-plane read and view (SPEC E-3, §3.11, D-8; INBOX-33, INBOX-35), with
the kernel's own Run domain as the control plane: the view says "ready" for a non-current
record exactly when T6r would answer `already_terminal` to the replay it allows."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import Applied, CompleteWithLease, Fence, Rejected, Replayed, RunAggregate, apply
from kernel.specs.codes import Code
from kernel.specs.states import (
    AttemptStatus,
    CompletionOutcome,
    LeaseStatus,
    Profile,
    ReleaseReason,
)
from kernel.worker.control_plane_view import (
    AuthorityFacts,
    authority_facts,
    control_plane_view,
)
from kernel.worker.journal import JournalApplied, journal_step
from kernel.worker.reconciler import (
    CompletionObserved,
    ControlPlaneView,
    ReceiptFacts,
    RunningObserved,
    Submission,
    TerminalFacts,
    UnknownInboxReason,
    UnknownObserved,
    completion_submission,
    reads_control_plane,
    same_completion,
)
from kernel.worker.record import JournalRecord
from tests.support import recovery_fixtures as rf
from tests.support.journal_fixtures import PIPELINE, T0, accepted, lease, offer

RUN, ATTEMPT = "r1", "r1-a1"
NOT_CURRENT = (
    Code.SESSION_FENCED,
    Code.WORKER_OFFLINE_AUTHORITY,
    Code.WORKER_SESSION_EXPIRED_AUTHORITY,
    Code.RUN_LEASE_EXPIRED_AUTHORITY,
)


def _control() -> RunAggregate:
    """The control plane's Run: granted to `rf.WORKER`, acknowledged starting and running."""
    return rf.remote_started(RUN, ATTEMPT, T0, running=True)


def _record(
    control: RunAggregate, *, version_delta: int = 0, session_id: str = ""
) -> JournalRecord:
    """A `running_acknowledged` journal record holding the control plane's lease (its version
    moved by `version_delta`, its session replaced by `session_id` when given)."""
    row = control.current_lease(rf.latest(control))
    assert row is not None
    snap = lease(
        version=row.version + version_delta,
        token=rf.lease_token(ATTEMPT, 1),
        worker_session_id=session_id or rf.WORKER.session_id,
        expires_at_ms=row.expires_at_ms,
    )
    record = accepted()
    for i, event in enumerate(PIPELINE[:4]):
        step = journal_step(record, event, T0 + i + 1)
        assert isinstance(step, JournalApplied)
        assert step.record is not None
        record = step.record
    return dataclasses.replace(record, offer=offer(snap))


def _complete(record: JournalRecord, facts: ReceiptFacts) -> CompleteWithLease:
    """The Coordinator's submission for `record` (its own fences) with the receipt's facts."""
    snap = record.offer.lease
    return CompleteWithLease(
        run_id=snap.run_id,
        attempt_id=snap.attempt_id,
        fence=Fence(
            snap.worker_id,
            snap.worker_session_id,
            snap.worker_generation,
            snap.lease_generation,
            snap.lease_token,
            snap.version,
        ),
        worker=rf.WORKER,
        callback_sequence=facts.callback_sequence,
        outcome=facts.outcome,
        exit_code=facts.exit_code,
    )


def _facts(aggregate: RunAggregate) -> AuthorityFacts:
    found = authority_facts(aggregate, RUN, ATTEMPT, 1)
    assert found is not None
    return found


receipt_facts = st.builds(
    ReceiptFacts,
    callback_sequence=st.integers(1, 3),
    finished_at_ms=st.just(T0 + 900),
    exit_code=st.sampled_from([None, 0, 1, 3]),
    outcome=st.sampled_from(list(CompletionOutcome)),
)


@pytest.mark.spec("INBOX-35", "INBOX-33")
@given(
    accepted_facts=receipt_facts,
    receipt=receipt_facts,
    version_delta=st.sampled_from([-1, 0, 1]),
    session_id=st.sampled_from(["", "w1-s2"]),
    value=st.sampled_from(NOT_CURRENT),
)
def test_ready_for_a_non_current_record_exactly_when_t6r_replays(
    accepted_facts: ReceiptFacts,
    receipt: ReceiptFacts,
    version_delta: int,
    session_id: str,
    value: Code,
) -> None:
    """E-3/D-8: the control plane accepted a completion (`accepted_facts`) under the lease;
    a record whose authority is no longer current is ready to submit its receipt's facts iff
    the kernel's T6r answers that very submission `already_terminal` (same fences at version
    + 1, same callback sequence, outcome and exit code); otherwise it is blocked with
    `control_plane_terminal` and nothing is submitted."""
    control = _control()
    original = _record(control)
    committed = apply(control, _complete(original, accepted_facts), T0 + 1_000)
    assert isinstance(committed, Applied)
    record = _record(control, version_delta=version_delta, session_id=session_id)
    view = control_plane_view(record, _facts(committed.aggregate))
    assert view.terminal
    submission = completion_submission(CompletionObserved(receipt), value, view)
    replay = apply(committed.aggregate, _complete(record, receipt), T0 + 2_000)
    replays = isinstance(replay, Replayed) and replay.code is Code.ALREADY_TERMINAL
    assert submission is not None
    assert submission.ready == replays
    if not submission.ready:
        assert submission.reason is Code.CONTROL_PLANE_TERMINAL


@pytest.mark.spec("INBOX-35")
def test_the_view_of_an_accepted_completion_names_its_facts() -> None:
    """INBOX-35: after T6, the read answers the completed lease at version + 1 and the
    Attempt's completion facts; the view of the record that sent it is the exact-replay case."""
    control = _control()
    record = _record(control)
    sent = ReceiptFacts(1, T0 + 900, 0, CompletionOutcome.SUCCEEDED)
    committed = apply(control, _complete(record, sent), T0 + 1_000)
    assert isinstance(committed, Applied)
    facts = _facts(committed.aggregate)
    assert facts.lease_status is LeaseStatus.COMPLETED
    assert facts.lease_version == record.offer.lease.version + 1
    assert facts.current_lease_generation == 1
    assert facts.release_reason is None
    assert facts.attempt_status is AttemptStatus.SUCCEEDED
    assert facts.terminal == TerminalFacts(AttemptStatus.SUCCEEDED, 1, 0)
    view = control_plane_view(record, facts)
    assert view == ControlPlaneView(True, True, TerminalFacts(AttemptStatus.SUCCEEDED, 1, 0))
    for value in NOT_CURRENT:
        assert completion_submission(CompletionObserved(sent), value, view) == Submission(True)
    other_exit = dataclasses.replace(sent, exit_code=1)
    assert completion_submission(CompletionObserved(other_exit), Code.CURRENT, view) == (
        Submission(False, Code.CONTROL_PLANE_TERMINAL)
    )
    assert same_completion(TerminalFacts(AttemptStatus.SUCCEEDED, 1, 0), sent)
    assert not same_completion(TerminalFacts(AttemptStatus.FAILED, 1, 0), sent)
    assert not same_completion(TerminalFacts(AttemptStatus.SUCCEEDED, 2, 0), sent)


@pytest.mark.spec("INBOX-33")
def test_a_lost_attempt_is_terminal_and_never_a_replay() -> None:
    """D-8: the control plane ended the Attempt `lost` (lease released `lease_expired`): the
    view is terminal, not the exact-replay case; whatever the authority, the completion is
    blocked with `control_plane_terminal`."""
    control = _control()
    record = _record(control)
    expired = apply(control, rf.expire_cmd(control, Profile.EDGE), rf.expires_at(control) + 1)
    assert isinstance(expired, Applied)
    facts = _facts(expired.aggregate)
    assert facts.lease_status is LeaseStatus.RELEASED
    assert facts.release_reason is ReleaseReason.LEASE_EXPIRED
    assert facts.terminal is not None
    assert facts.terminal.status is AttemptStatus.LOST
    view = control_plane_view(record, facts)
    assert view.terminal
    assert not view.completed_by_record_fences_at_next_version
    done = CompletionObserved(ReceiptFacts(1, T0 + 900, 0, CompletionOutcome.SUCCEEDED))
    for value in (Code.CURRENT, *NOT_CURRENT):
        assert completion_submission(done, value, view) == Submission(
            False, Code.CONTROL_PLANE_TERMINAL
        )
    replay = apply(expired.aggregate, _complete(record, done.facts), rf.expires_at(control) + 2)
    assert isinstance(replay, Rejected)  # and T6r agrees: nothing to replay


@pytest.mark.spec("INBOX-33")
def test_a_live_lease_is_not_terminal_and_the_authority_decides() -> None:
    """§3.11: while the lease is `leased` and the Attempt running, the view is not terminal:
    the record's own authority decides (current: ready; otherwise blocked by it)."""
    control = _control()
    record = _record(control)
    facts = _facts(control)
    assert facts.terminal is None
    assert facts.lease_status is LeaseStatus.LEASED
    view = control_plane_view(record, facts)
    assert view == ControlPlaneView(False, False, None)
    done = CompletionObserved(ReceiptFacts(1, T0 + 900, 0, CompletionOutcome.SUCCEEDED))
    assert completion_submission(done, Code.CURRENT, view) == Submission(True)
    for value in NOT_CURRENT:
        assert completion_submission(done, value, view) == Submission(False, value)


@pytest.mark.spec("INBOX-33")
def test_facts_about_another_lease_fail_closed() -> None:
    """A read answering for another Run, Attempt or lease generation, or a lease no longer the
    Attempt's current one, never makes a replay ready: the view is terminal, not exact."""
    control = _control()
    record = _record(control)
    sent = ReceiptFacts(1, T0 + 900, 0, CompletionOutcome.SUCCEEDED)
    committed = apply(control, _complete(record, sent), T0 + 1_000)
    assert isinstance(committed, Applied)
    facts = _facts(committed.aggregate)
    for changed in (
        dataclasses.replace(facts, run_id="r2"),
        dataclasses.replace(facts, attempt_id="r1-a2"),
        dataclasses.replace(facts, lease_generation=2),
        dataclasses.replace(facts, current_lease_generation=2),
        dataclasses.replace(facts, worker_generation=2),
        dataclasses.replace(facts, lease_version=facts.lease_version + 1),
    ):
        view = control_plane_view(record, changed)
        assert view.terminal
        assert not view.completed_by_record_fences_at_next_version
        assert completion_submission(CompletionObserved(sent), Code.SESSION_FENCED, view) == (
            Submission(False, Code.CONTROL_PLANE_TERMINAL)
        )


def test_the_read_knows_no_other_run_attempt_or_generation() -> None:
    """E-3: `None` (no view) when the control plane has no such lease."""
    control = _control()
    assert authority_facts(None, RUN, ATTEMPT, 1) is None
    assert authority_facts(control, "r2", ATTEMPT, 1) is None
    assert authority_facts(control, RUN, "r1-a9", 1) is None
    assert authority_facts(control, RUN, ATTEMPT, 2) is None


@pytest.mark.spec("INBOX-44")
def test_the_facts_carry_no_token_or_digest() -> None:
    """S-1/INBOX-44: the read's answer has no token or digest, in its fields or its repr."""
    control = _control()
    facts = _facts(control)
    row = control.current_lease(rf.latest(control))
    assert row is not None
    token = rf.lease_token(ATTEMPT, 1)
    text = repr(facts) + repr(control_plane_view(_record(control), facts))
    assert token.reveal() not in text
    assert row.token_digest not in text
    assert "digest" not in text
    assert "token" not in text


def test_only_completion_evidence_reads_the_control_plane() -> None:
    """§3.11: the view decides only a `completion_observed`'s submission."""
    done = CompletionObserved(ReceiptFacts(1, T0 + 900, 0, CompletionOutcome.SUCCEEDED))
    assert reads_control_plane(done)
    assert not reads_control_plane(RunningObserved())
    assert not reads_control_plane(UnknownObserved(UnknownInboxReason.HANDLE_MISSING))
