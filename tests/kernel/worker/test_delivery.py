"""Delivery validation and conflicts before any journal write (SPEC §3.8: D-1..D-9, C-1)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import Secret
from kernel.entities import WorkerSession
from kernel.outcomes import Rejected
from kernel.specs.codes import Code
from kernel.specs.journal import DeliveryKind, JournalState, ReplayAction
from kernel.specs.states import LeaseStatus, WorkerSessionStatus
from kernel.worker.delivery import (
    Accept,
    Continue,
    DeliveryDecision,
    Merge,
    decide_delivery,
)
from kernel.worker.journal import JournalApplied, LeaseVersionAdvanced, journal_step
from kernel.worker.record import JournalRecord, OfferCandidate
from tests.support.journal_fixtures import PIPELINE, T0, accepted, lease, offer, spec

NOW = T0 + 1_000


def runtime(
    status: WorkerSessionStatus = WorkerSessionStatus.ONLINE,
    session: str = "s1",
    expires: int = T0 + 10**9,
) -> WorkerSession:
    return WorkerSession("w1", session, 1, status, expires, ("shell",))


def decide(
    delivered: object = None,
    existing: JournalRecord | None = None,
    bound: WorkerSession | None = None,
    *,
    held: int = 0,
    capacity: int = 64,
    at: int = NOW,
) -> DeliveryDecision:
    the_offer = offer() if delivered is None else delivered
    return decide_delivery(
        the_offer,  # type: ignore[arg-type]
        existing,
        runtime() if bound is None else bound,
        records_held=held,
        capacity=capacity,
        observed_at_ms=at,
    )


def _at(n: int) -> JournalRecord:
    record = accepted()
    for i, event in enumerate(PIPELINE[:n]):
        outcome = journal_step(record, event, T0 + i + 1)
        assert isinstance(outcome, JournalApplied)
        assert outcome.record is not None
        record = outcome.record
    return record


def test_a_valid_new_offer_is_accepted() -> None:
    assert decide() == Accept(offer())


@pytest.mark.spec("INBOX-11")
@pytest.mark.parametrize(
    ("bound", "at", "code"),
    [
        (runtime(), T0 + 30_000, Code.RUN_LEASE_EXPIRED),  # at the lease's expiry instant
        (runtime(session="s2"), NOW, Code.WORKER_SESSION_MISMATCH),  # a replaced session
        (runtime(WorkerSessionStatus.OFFLINE), NOW, Code.WORKER_OFFLINE),
        (runtime(expires=NOW), NOW, Code.WORKER_SESSION_EXPIRED),
    ],
    ids=["run-lease-expired", "session-replaced", "worker-offline", "session-expired"],
)
def test_deliveries_without_live_authority_are_refused(
    bound: WorkerSession, at: int, code: Code
) -> None:
    """INBOX-11: an expired Run lease, a replaced session, an offline Worker or an expired
    session lease is refused before any journal write (so no record can be created)."""
    assert decide(bound=bound, at=at) == Rejected(code)
    assert decide(existing=_at(2), bound=bound, at=at) == Rejected(code)


@pytest.mark.spec("INBOX-12")
def test_draining_refuses_new_claims_and_lets_a_known_lease_recovery_through() -> None:
    """INBOX-12: while draining, `new_claim` is refused before the journal write; a
    `lease_recovery` for an existing record of the same lease proceeds; one for an unknown
    offer is refused [decision D-8]."""
    draining = runtime(WorkerSessionStatus.DRAINING)
    assert decide(bound=draining) == Rejected(Code.WORKER_DRAINING)
    recovery = offer(delivery_kind=DeliveryKind.LEASE_RECOVERY)
    assert decide(recovery, bound=draining) == Rejected(Code.WORKER_DRAINING)
    started = _at(3)
    assert decide(recovery, started, draining) == Continue(ReplayAction.REPLAY_RUNNING_ACK)
    newer = offer(lease(version=7), delivery_kind=DeliveryKind.LEASE_RECOVERY)
    decision = decide(newer, started, draining)
    assert isinstance(decision, Merge)
    assert decision.event == LeaseVersionAdvanced(newer.lease, DeliveryKind.LEASE_RECOVERY)


OTHER_TOKEN = Secret.of("a-different-lease-token-0123456789abcdefXYZ", "lease_token")


@pytest.mark.spec("INBOX-09")
@pytest.mark.parametrize(
    "variant",
    ["digest", "task_revision", "token", "candidate"],
)
def test_a_reused_offer_id_with_other_content_is_a_conflict(variant: str) -> None:
    """INBOX-09: a delivery reusing an `offer_id` with a different digest, Task revision,
    token or candidate is `Rejected(OFFER_CONFLICT)` before any side effect (a different
    session, generation or lease generation is a different `offer_id`, refused by D-5 or
    simply another offer)."""
    existing = _at(3)
    if variant == "digest":
        delivered = offer(execution_spec=spec(argv=["rm", "-rf", "/"]))
    elif variant == "task_revision":
        candidate = OfferCandidate("r1", "r1-a1", "proj", "task", 2, "shell")
        delivered = offer(execution_spec=spec(task_revision=2), candidate=candidate)
    elif variant == "token":
        delivered = offer(lease(token=OTHER_TOKEN))
    else:
        candidate = OfferCandidate("r1", "r1-a1", "proj", "task", 1, "python")
        delivered = offer(candidate=candidate)
    assert delivered.offer_id == existing.offer_id
    assert decide(delivered, existing) == Rejected(Code.OFFER_CONFLICT)


@pytest.mark.spec("INBOX-10")
@given(st.integers(1, 9))
def test_a_known_offer_merges_only_a_higher_lease_version(version: int) -> None:
    """INBOX-10: a higher version is merged (the lease only); equal or lower writes nothing and
    continues with the record's state."""
    existing = _at(3)  # lease version 3 (the starting ACK's)
    decision = decide(offer(lease(version=version)), existing)
    if version > existing.offer.lease.version:
        assert isinstance(decision, Merge)
        assert decision.event.lease.version == version
    else:
        assert decision == Continue(ReplayAction.REPLAY_RUNNING_ACK)


def test_a_final_record_never_takes_a_newer_lease() -> None:
    done = _at(len(PIPELINE))
    assert done.state is JournalState.COMPLETION_ACKNOWLEDGED
    assert decide(offer(lease(version=9)), done) == Continue(ReplayAction.REPLAYED_COMPLETED)


def test_the_integrity_checks_come_first_in_spec_order() -> None:
    """D-1..D-4 (and the order: a delivery failing several reports the first)."""
    bad_status = offer(lease(status=LeaseStatus.RELEASED))
    assert decide(bad_status) == Rejected(Code.OFFER_INVALID)
    forged = dataclasses.replace(offer(), offer_id="c" * 64)
    assert decide(forged) == Rejected(Code.OFFER_ID_MISMATCH)
    wrong_digest = dataclasses.replace(offer(), execution_spec_digest="d" * 64)
    assert decide(wrong_digest, at=T0 + 30_000) == Rejected(Code.OFFER_DIGEST_MISMATCH)
    drift = offer(execution_spec=spec(task_id="other-task"))
    assert decide(drift) == Rejected(Code.OFFER_IDENTITY_DRIFT)
    not_json = dataclasses.replace(offer(), execution_spec={"x": 1.5})
    assert decide(not_json) == Rejected(Code.OFFER_INVALID)


@pytest.mark.spec("INBOX-17")
def test_a_full_journal_refuses_a_new_offer_and_never_a_known_one() -> None:
    """F-7 / D-9 (the kernel's part of INBOX-17): at capacity a new offer is
    `Rejected(JOURNAL_FULL)`, whatever the states held; a known offer is not a new record."""
    assert decide(held=64, capacity=64) == Rejected(Code.JOURNAL_FULL)
    assert decide(held=63, capacity=64) == Accept(offer())
    assert decide(existing=_at(1), held=64, capacity=64) == Continue(
        ReplayAction.CONTINUE_FIRST_START
    )
