"""The Worker's control-plane read and the view recovery builds from it (SPEC E-3, §3.11, D-8).

E-3 gives the Worker one read: the current lease authority of an Attempt (generation, version,
status, release reason, the Worker fences the lease names) and, when the Attempt is final, its
completion facts. `authority_facts(aggregate, ...)` is that answer, computed from the aggregate
the control plane loaded (so every control plane answers alike); `control_plane_view(record,
facts)` is the §3.11 `ControlPlaneView` of one journal record: whether the control plane is
terminal for the record's lease, and whether the lease is `completed` by exactly the record's
fences at `record.lease.version + 1` (the case T6r's exact replay exists for, INBOX-35).

Whether the completion facts are "the same" as the receipt's is decided later, against the
evidence (`kernel.worker.reconciler.completion_submission`): a record whose Attempt the control
plane finished with the same facts converges by exact replay to `completion_acknowledged`; any
other terminal fact leaves it blocked with its evidence (D-8).

Nothing here carries a token or a digest: the view does not compare the lease token. It needs
not: a record that may own an execution passed T2 with its token, and the replay itself is
still fenced by the token (a mismatch is refused, never accepted).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.entities import RunAggregate
from kernel.specs.states import (
    FINAL_ATTEMPT_STATUSES,
    AttemptStatus,
    LeaseStatus,
    ReleaseReason,
)
from kernel.worker.reconciler import ControlPlaneView, TerminalFacts
from kernel.worker.record import JournalRecord

__all__ = ["AuthorityFacts", "TerminalFacts", "authority_facts", "control_plane_view"]


@dataclass(frozen=True, slots=True)
class AuthorityFacts:
    """E-3: the control plane's facts about one lease row of an Attempt (the generation asked
    for) and the Attempt itself. Ids, states, versions, times and codes only (S-1).

    :ivar current_lease_generation: the Attempt's current lease generation (`None` when it has
        none, e.g. after a requeue cleared the binding).
    :ivar terminal: the Attempt's completion facts when it is final, else `None`.
    """

    run_id: str
    attempt_id: str
    lease_generation: int
    current_lease_generation: int | None
    lease_status: LeaseStatus
    lease_version: int
    release_reason: ReleaseReason | None
    worker_id: str
    worker_session_id: str
    worker_generation: int
    lease_expires_at_ms: int
    attempt_status: AttemptStatus
    terminal: TerminalFacts | None


def authority_facts(
    aggregate: RunAggregate | None, run_id: str, attempt_id: str, lease_generation: int
) -> AuthorityFacts | None:
    """E-3's answer from the aggregate the control plane loaded (by Attempt): `None` when the
    control plane knows no such Attempt of that Run or no lease of that generation."""
    if aggregate is None or aggregate.run.run_id != run_id:
        return None
    attempt = aggregate.attempt(attempt_id)
    lease = aggregate.lease(attempt_id, lease_generation) if attempt is not None else None
    if attempt is None or lease is None:
        return None
    terminal = (
        TerminalFacts(attempt.status, attempt.callback_sequence, attempt.exit_code)
        if attempt.status in FINAL_ATTEMPT_STATUSES
        else None
    )
    return AuthorityFacts(
        run_id=lease.run_id,
        attempt_id=lease.attempt_id,
        lease_generation=lease.lease_generation,
        current_lease_generation=attempt.lease_generation,
        lease_status=lease.status,
        lease_version=lease.version,
        release_reason=lease.release_reason,
        worker_id=lease.worker_id,
        worker_session_id=lease.worker_session_id,
        worker_generation=lease.worker_generation,
        lease_expires_at_ms=lease.expires_at_ms,
        attempt_status=attempt.status,
        terminal=terminal,
    )


def control_plane_view(record: JournalRecord, facts: AuthorityFacts) -> ControlPlaneView:
    """§3.11's optional view of `record` from E-3's `facts` (module docstring).

    `terminal`: the Attempt is final, or the record's lease is no longer `leased` (completed or
    released: its authority is over), or the facts are not about the record's lease at all
    (fail closed). `completed_by_record_fences_at_next_version`: the record's lease row is
    `completed` at `record.lease.version + 1`, names exactly the record's Worker id, session and
    generation, is still the Attempt's current generation, and the Attempt is final."""
    lease = record.offer.lease
    same_lease = (facts.run_id, facts.attempt_id, facts.lease_generation) == (
        lease.run_id,
        lease.attempt_id,
        lease.lease_generation,
    )
    terminal = (
        not same_lease
        or facts.attempt_status in FINAL_ATTEMPT_STATUSES
        or facts.lease_status is not LeaseStatus.LEASED
    )
    exact = (
        same_lease
        and facts.lease_status is LeaseStatus.COMPLETED
        and facts.lease_version == lease.version + 1
        and (facts.worker_id, facts.worker_session_id, facts.worker_generation)
        == (lease.worker_id, lease.worker_session_id, lease.worker_generation)
        and facts.current_lease_generation == lease.lease_generation
        and facts.terminal is not None
    )
    return ControlPlaneView(
        terminal=terminal,
        completed_by_record_fences_at_next_version=exact,
        completion=facts.terminal if same_lease else None,
    )
