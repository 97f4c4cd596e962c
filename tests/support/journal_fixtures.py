"""Offers, journal records and journal events for the journal kernel tests (SPEC §3.2-§3.7).

Every record is reached through `journal_step` from a delivery, never assembled by hand, so
each one is a revision the kernel can produce. `EVENTS` draws any event of §3.6 with valid or
plausible payloads; the transition decides whether it applies.
"""

from __future__ import annotations

import dataclasses

from hypothesis import strategies as st

from kernel import Secret, token_digest
from kernel.identity import execution_spec_digest, offer_id
from kernel.specs.journal import DeliveryKind
from kernel.specs.states import LeaseStatus
from kernel.worker.journal import (
    CompletionAcknowledged,
    ControlPlaneAlreadyRunning,
    ControlPlaneTerminal,
    DeliveryAccepted,
    FailStartAcknowledged,
    HandleReturned,
    JournalApplied,
    JournalEvent,
    LaunchOutcomeUnknown,
    LeaseLost,
    LeaseVersionAdvanced,
    PrepareFailed,
    PrepareSucceeded,
    RetentionDelete,
    RunningAcknowledged,
    StartingAcknowledged,
    StartRefused,
    journal_step,
)
from kernel.worker.record import JournalRecord, Offer, OfferCandidate, OfferLease, OfferWorker

T0 = 1_000_000
LEASE_TOKEN = Secret.of("lease-token-for-the-journal-tests-0123456789", "lease_token")
CALLBACK_TOKEN = "callback-token-of-the-journal-tests-abcdef012345"  # noqa: S105 - a test value
CALLBACK_DIGEST = token_digest(CALLBACK_TOKEN)


def lease(version: int = 2, token: Secret = LEASE_TOKEN, **changes: object) -> OfferLease:
    base = OfferLease(
        run_id="r1",
        attempt_id="r1-a1",
        lease_generation=1,
        version=version,
        status=LeaseStatus.LEASED,
        worker_id="w1",
        worker_session_id="s1",
        worker_generation=1,
        lease_token=token,
        expires_at_ms=T0 + 30_000,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def spec(**changes: object) -> dict[str, object]:
    """An ExecutionSpec naming the Attempt of `lease()` (D-4 [decision])."""
    base: dict[str, object] = {
        "run_id": "r1",
        "attempt_id": "r1-a1",
        "project_id": "proj",
        "task_id": "task",
        "task_revision": 1,
        "argv": ["echo", "secret-command-line"],
    }
    return base | changes


def offer(
    snapshot: OfferLease | None = None,
    *,
    execution_spec: dict[str, object] | None = None,
    delivery_kind: DeliveryKind = DeliveryKind.NEW_CLAIM,
    candidate: OfferCandidate | None = None,
) -> Offer:
    snap = lease() if snapshot is None else snapshot
    document = spec() if execution_spec is None else execution_spec
    return Offer(
        offer_id=offer_id(
            snap.attempt_id,
            snap.lease_generation,
            snap.worker_id,
            snap.worker_session_id,
            snap.worker_generation,
        ),
        execution_spec_digest=execution_spec_digest(document),
        delivery_kind=delivery_kind,
        candidate=(
            OfferCandidate("r1", "r1-a1", "proj", "task", 1, "shell")
            if candidate is None
            else candidate
        ),
        worker=OfferWorker(snap.worker_id, snap.worker_session_id, snap.worker_generation),
        lease=snap,
        execution_spec=document,
    )


def accepted() -> JournalRecord:
    outcome = journal_step(None, DeliveryAccepted(offer()), T0)
    assert isinstance(outcome, JournalApplied)
    assert outcome.record is not None
    return outcome.record


PIPELINE: tuple[JournalEvent, ...] = (
    StartingAcknowledged(lease(version=3)),
    PrepareSucceeded(1, CALLBACK_DIGEST, T0 + 5),
    HandleReturned("posix:v1:boot:4242:99"),
    RunningAcknowledged(),
    CompletionAcknowledged(),
)


def events() -> st.SearchStrategy[JournalEvent]:
    """Any §3.6 event (not the first delivery), with payloads that are valid for the record of
    `lease()` unless drawn otherwise."""
    versions = st.integers(1, 6)
    return st.one_of(
        versions.map(lambda v: StartingAcknowledged(lease(version=v))),
        st.just(ControlPlaneAlreadyRunning()),
        st.just(ControlPlaneTerminal()),
        st.builds(PrepareSucceeded, st.integers(1, 3), st.just(CALLBACK_DIGEST), st.just(T0)),
        st.builds(PrepareFailed, st.sampled_from([None, "PREPARE_FAILED"])),
        st.builds(HandleReturned, st.just("posix:v1:boot:4242:99")),
        st.builds(StartRefused, st.sampled_from([None, "ENOENT"])),
        st.just(LaunchOutcomeUnknown()),
        st.just(RunningAcknowledged()),
        st.just(FailStartAcknowledged()),
        st.builds(CompletionAcknowledged, st.sampled_from([None, 1]), st.just(CALLBACK_DIGEST)),
        st.builds(LeaseLost, st.booleans()),
        st.builds(
            LeaseVersionAdvanced,
            versions.map(lambda v: lease(version=v)),
            st.sampled_from(list(DeliveryKind)),
        ),
        st.just(RetentionDelete()),
    )


# -- journal adapter helpers (file and SQLite journals, the journal contract) ----------------
def _applied(record: JournalRecord | None, event: JournalEvent, at_ms: int) -> JournalRecord:
    outcome = journal_step(record, event, at_ms)
    assert isinstance(outcome, JournalApplied), (event, outcome)
    assert outcome.record is not None
    return outcome.record


def accepted_offer(generation: int) -> JournalRecord:
    """Revision 0 of a distinct offer per `generation` (>= 1): the lease generation is part of
    the offer id (§0.4) and nothing else changes; `accepted_offer(1) == accepted()`."""
    return _applied(None, DeliveryAccepted(offer(lease(lease_generation=generation))), T0)


def revisions(generation: int = 1) -> tuple[JournalRecord, ...]:
    """Revisions 0..5 of the offer of `accepted_offer(generation)`: the happy `PIPELINE` (its
    starting ACK with that lease generation), one kernel step per millisecond."""
    steps = (StartingAcknowledged(lease(version=3, lease_generation=generation)), *PIPELINE[1:])
    records = [accepted_offer(generation)]
    for i, event in enumerate(steps):
        records.append(_applied(records[-1], event, T0 + i + 1))
    return tuple(records)


def accepted_with_padding(length: int) -> JournalRecord:
    """Revision 0 of `accepted()`'s offer whose command line carries `length` more ASCII bytes:
    its canonical encoding is exactly `length` bytes longer than with `length = 0`."""
    document = spec(argv=["echo", "x" * length])
    return _applied(None, DeliveryAccepted(offer(execution_spec=document)), T0)


def oversized() -> JournalRecord:
    """Revision 0 whose canonical bytes are over 192 KiB (F-2): a very long command line."""
    return accepted_with_padding(200 * 1024)
