"""The Run-domain invariants I-1..I-9 (SPEC §1.10) as pure predicates.

Each predicate returns the list of violations (empty when the invariant holds) so that a model
test, a contract and a conformance report can all say *which* rule broke and where. Messages
carry ids, states and numbers only (S-1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kernel.entities import Event, RunAggregate
from kernel.specs.limits import policy_within_limits
from kernel.specs.states import (
    FINAL_ATTEMPT_STATUSES,
    FINAL_LEASE_STATUSES,
    LIVE_ATTEMPT_STATUSES,
    AttemptStatus,
    LeaseStatus,
    ReleaseReason,
    RunKind,
    RunStatus,
)

_HEX = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class Violation:
    invariant: str
    run_id: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant} run={self.run_id}: {self.detail}"


def i1_attempt_numbering(agg: RunAggregate) -> list[Violation]:
    """I-1: Attempt numbers are exactly 1..N; at most one non-terminal Attempt, the latest."""
    out: list[Violation] = []
    run_id = agg.run.run_id
    numbers = [a.number for a in agg.attempts]
    if numbers != list(range(1, len(numbers) + 1)):
        out.append(Violation("I-1", run_id, f"attempt numbers {numbers} are not 1..N"))
    ids = [a.attempt_id for a in agg.attempts]
    if len(set(ids)) != len(ids):
        out.append(Violation("I-1", run_id, "duplicate attempt ids"))
    for attempt in agg.attempts:
        if attempt.run_id != run_id:
            out.append(Violation("I-1", run_id, f"attempt {attempt.attempt_id} of another run"))
    live = [a for a in agg.attempts if a.status not in FINAL_ATTEMPT_STATUSES]
    if len(live) > 1:
        out.append(Violation("I-1", run_id, f"{len(live)} non-terminal attempts"))
    if live and live[-1] is not agg.attempts[-1]:
        out.append(Violation("I-1", run_id, "the non-terminal attempt is not the latest"))
    return out


def i2_status_compatibility(agg: RunAggregate) -> list[Violation]:
    """I-2: the Run status agrees with its latest Attempt and that Attempt's current lease."""
    run = agg.run
    a = agg.latest_attempt
    out: list[Violation] = []

    def bad(detail: str) -> list[Violation]:
        return [Violation("I-2", run.run_id, detail)]

    if run.kind is RunKind.WORKFLOW and run.status is RunStatus.RUNNING:
        return out  # a Workflow aggregate Run may run with no ordinary Attempt (§4)
    status = run.status
    if status is RunStatus.CREATED:
        return bad("created run has attempts") if a is not None else out
    if a is None:
        # A Run that never left `created` may end without an Attempt (orphan failure, §2.2;
        # cancellation, §1.9); every other status needs one.
        return out if status.terminal else bad(f"{status} run has no attempt")
    leased = agg.leased_lease(a.attempt_id)
    if status is RunStatus.QUEUED:
        if a.status is not AttemptStatus.CLAIMED or leased is not None:
            return bad(f"queued run with attempt {a.status}, leased={leased is not None}")
    elif status is RunStatus.DISPATCHING:
        if a.status is AttemptStatus.CLAIMED:
            if leased is None:
                return bad("dispatching run with a claimed attempt and no leased lease")
        elif a.status is AttemptStatus.STARTING:
            if _remote_without_authority(agg, a.attempt_id, leased is not None):
                return bad("dispatching remote attempt lost its lease without a cancel intent")
        else:
            return bad(f"dispatching run with attempt {a.status}")
    elif status is RunStatus.RUNNING:
        if a.status is not AttemptStatus.RUNNING:
            return bad(f"running run with attempt {a.status}")
        if _remote_without_authority(agg, a.attempt_id, leased is not None):
            return bad("running remote attempt lost its lease without a cancel intent")
    elif status in (RunStatus.LOST, RunStatus.RETRY_WAIT):
        if a.status is not AttemptStatus.LOST:
            return bad(f"{status} run with attempt {a.status}")
        if status is RunStatus.RETRY_WAIT and (
            agg.policy is None or agg.policy.next_attempt_at_ms is None
        ):
            return bad("retry_wait run without policy next_attempt_at_ms")
    elif a.status not in FINAL_ATTEMPT_STATUSES:
        return bad(f"terminal run {status} with attempt {a.status}")
    if status is RunStatus.FAILED and run.error_code is None:
        return bad("failed run without error_code")  # §1.2
    return out


def _remote_without_authority(agg: RunAggregate, attempt_id: str, leased: bool) -> bool:
    """A remote starting/running Attempt holds a `leased` lease, except after T9, which revokes
    the lease of an execution whose Run has a cancellation intent and leaves the rest to the
    cancellation path (docs/decisions.md)."""
    attempt = agg.attempt(attempt_id)
    if attempt is None or attempt.lease_generation is None or leased:
        return False
    current = agg.current_lease(attempt)
    revoked_under_intent = (
        agg.run.has_cancel_intent
        and current is not None
        and current.release_reason is ReleaseReason.LEASE_EXPIRED
    )
    return not revoked_under_intent


def i3_policy_cursor(agg: RunAggregate) -> list[Violation]:
    """I-3: `policy.next_attempt_at_ms` is set iff the Run is `retry_wait`."""
    has_cursor = agg.policy is not None and agg.policy.next_attempt_at_ms is not None
    if has_cursor != (agg.run.status is RunStatus.RETRY_WAIT):
        return [Violation("I-3", agg.run.run_id, f"cursor={has_cursor} status={agg.run.status}")]
    if agg.policy is not None and agg.policy.run_id != agg.run.run_id:
        return [Violation("I-3", agg.run.run_id, "policy of another run")]
    return []


def i4_leased_leases(agg: RunAggregate) -> list[Violation]:
    """I-4: a `leased` lease belongs to a `claimed|starting|running` Attempt; at most one per
    Attempt; lease rows are unique per `(attempt_id, lease_generation)`."""
    out: list[Violation] = []
    run_id = agg.run.run_id
    keys = [(lease.attempt_id, lease.lease_generation) for lease in agg.leases]
    if len(set(keys)) != len(keys):
        out.append(Violation("I-4", run_id, "duplicate (attempt_id, lease_generation)"))
    for lease in agg.leases:
        attempt = agg.attempt(lease.attempt_id)
        if attempt is None or lease.run_id != run_id:
            out.append(Violation("I-4", run_id, f"lease of unknown attempt {lease.attempt_id}"))
            continue
        if lease.status is LeaseStatus.LEASED and attempt.status not in LIVE_ATTEMPT_STATUSES:
            out.append(
                Violation("I-4", run_id, f"leased lease on {attempt.status} {attempt.attempt_id}")
            )
    for attempt in agg.attempts:
        count = sum(1 for x in agg.leases_of(attempt.attempt_id) if x.status is LeaseStatus.LEASED)
        if count > 1:
            out.append(Violation("I-4", run_id, f"{count} leased leases on {attempt.attempt_id}"))
    return out


def i6_lease_mirror(agg: RunAggregate) -> list[Violation]:
    """I-6: `Attempt.lease_version` equals the version of lease `(attempt, lease_generation)`;
    an Attempt never granted a lease has neither field; generations are the latest row's."""
    out: list[Violation] = []
    run_id = agg.run.run_id
    for attempt in agg.attempts:
        rows = list(agg.leases_of(attempt.attempt_id))
        if attempt.lease_generation is None:
            if attempt.lease_version is not None or rows:
                out.append(Violation("I-6", run_id, f"{attempt.attempt_id} lease mirror w/o gen"))
            continue
        current = agg.current_lease(attempt)
        if current is None:
            out.append(Violation("I-6", run_id, f"{attempt.attempt_id} current lease missing"))
        elif current.version != attempt.lease_version:
            out.append(
                Violation(
                    "I-6",
                    run_id,
                    f"{attempt.attempt_id} lease_version {attempt.lease_version} "
                    f"!= lease version {current.version}",
                )
            )
        if rows and max(r.lease_generation for r in rows) != attempt.lease_generation:
            out.append(Violation("I-6", run_id, f"{attempt.attempt_id} not on newest generation"))
    return out


def i7_events(agg: RunAggregate, events: Sequence[Event]) -> list[Violation]:
    """I-7 (with V-3/V-4): Event `seq` is 1..K gapless, `Run.event_seq = K`, times are
    non-decreasing and never before the Run's (or the Event's Attempt's) creation."""
    out: list[Violation] = []
    run = agg.run
    seqs = [e.seq for e in events]
    if seqs != list(range(1, len(seqs) + 1)):
        out.append(Violation("I-7", run.run_id, f"event seqs {seqs[:8]}... not gapless"))
    if run.event_seq != len(events):
        out.append(Violation("I-7", run.run_id, f"event_seq {run.event_seq} != {len(events)}"))
    keys = [e.dedupe_key for e in events]
    if len(set(keys)) != len(keys):
        out.append(Violation("I-7", run.run_id, "duplicate dedupe_key"))
    previous = run.created_at_ms
    for event in events:
        if event.run_id != run.run_id:
            out.append(Violation("I-7", run.run_id, f"event {event.seq} of another run"))
        if event.at_ms < previous:
            out.append(Violation("I-7", run.run_id, f"event {event.seq} goes back in time"))
        previous = max(previous, event.at_ms)
        if event.attempt_id is not None:
            attempt = agg.attempt(event.attempt_id)
            if attempt is None:
                out.append(Violation("I-7", run.run_id, f"event {event.seq} unknown attempt"))
            elif event.at_ms < attempt.created_at_ms:
                out.append(Violation("I-7", run.run_id, f"event {event.seq} before its attempt"))
    return out


def i8_no_automatic_retry_link(agg: RunAggregate) -> list[Violation]:
    """I-8: no automatic transition sets `retry_of_run_id`; this kernel has no manual re-run
    command, so the field is never set."""
    if agg.run.retry_of_run_id is not None:
        return [Violation("I-8", agg.run.run_id, "retry_of_run_id set")]
    return []


def i9_token_digests(agg: RunAggregate) -> list[Violation]:
    """I-9: the control plane stores lease tokens only as SHA-256 digests (S-1)."""
    out: list[Violation] = []
    for lease in agg.leases:
        digest = lease.token_digest
        if len(digest) != 64 or not set(digest) <= _HEX:
            out.append(Violation("I-9", agg.run.run_id, f"{lease.attempt_id} token not a digest"))
    for attempt in agg.attempts:
        cb = attempt.callback_token_sha256
        if cb is not None and (len(cb) != 64 or not set(cb) <= _HEX):
            out.append(Violation("I-9", agg.run.run_id, f"{attempt.attempt_id} callback not hex"))
    return out


def time_order(agg: RunAggregate) -> list[Violation]:
    """V-4/V-5 on the durable rows: no recorded time precedes the time it depends on."""
    out: list[Violation] = []
    run = agg.run
    if run.updated_at_ms < run.created_at_ms:
        out.append(Violation("V-5", run.run_id, "run updated before created"))
    for attempt in agg.attempts:
        if attempt.created_at_ms < run.created_at_ms:
            out.append(Violation("V-5", run.run_id, f"{attempt.attempt_id} before its run"))
        if attempt.finished_at_ms is not None and attempt.finished_at_ms < attempt.created_at_ms:
            out.append(Violation("V-5", run.run_id, f"{attempt.attempt_id} finished early"))
    for lease in agg.leases:
        if not lease.acquired_at_ms <= lease.updated_at_ms:
            out.append(Violation("V-5", run.run_id, f"{lease.attempt_id} lease times"))
        if lease.version < 1 or lease.lease_generation < 1:
            out.append(Violation("V-2", run.run_id, f"{lease.attempt_id} lease version/gen < 1"))
    if run.version < 1 or run.event_seq < 0:
        out.append(Violation("V-1", run.run_id, "run version < 1"))
    return out


def stored_policy_limits(agg: RunAggregate) -> list[Violation]:
    """Appendix E-4: admission limits are invariants. A stored policy outside A-3 (for example
    `max_attempts` 17, written by something other than admission) is a broken aggregate, so
    every transition on it fails closed like any other."""
    policy = agg.policy
    if policy is None or policy_within_limits(
        policy.max_attempts, policy.backoff_base_ms, policy.backoff_max_ms
    ):
        return []
    return [Violation("E-4", agg.run.run_id, "stored retry policy outside the A-3 limits")]


STATE_INVARIANTS: tuple[Callable[[RunAggregate], list[Violation]], ...] = (
    i1_attempt_numbering,
    i2_status_compatibility,
    i3_policy_cursor,
    i4_leased_leases,
    i6_lease_mirror,
    i8_no_automatic_retry_link,
    i9_token_digests,
    time_order,
    stored_policy_limits,
)


def check_invariants(agg: RunAggregate, events: Sequence[Event] | None = None) -> list[Violation]:
    """All state invariants (I-1..I-4, I-6..I-9, V-rules); I-7 only when `events` is given.
    I-5 relates two states and lives in `check_step`."""
    out: list[Violation] = []
    for predicate in STATE_INVARIANTS:
        out.extend(predicate(agg))
    if events is not None:
        out.extend(i7_events(agg, events))
    return out


def i5_finality(before: RunAggregate, after: RunAggregate) -> list[Violation]:
    """I-5 (RUN-08, LEASE-01): `completed`/`released` leases and `lost`/terminal Attempts never
    change again, and nothing is ever removed."""
    out: list[Violation] = []
    run_id = before.run.run_id
    for attempt in before.attempts:
        now = after.attempt(attempt.attempt_id)
        if now is None:
            out.append(Violation("I-5", run_id, f"attempt {attempt.attempt_id} removed"))
        elif attempt.status in FINAL_ATTEMPT_STATUSES and now != attempt:
            out.append(Violation("I-5", run_id, f"final attempt {attempt.attempt_id} changed"))
    for lease in before.leases:
        now_lease = after.lease(lease.attempt_id, lease.lease_generation)
        if now_lease is None:
            out.append(Violation("I-5", run_id, f"lease {lease.attempt_id} removed"))
        elif lease.status in FINAL_LEASE_STATUSES and now_lease != lease:
            out.append(Violation("I-5", run_id, f"final lease {lease.attempt_id} changed"))
    if before.run.status.terminal and after.run != before.run:
        out.append(Violation("I-5", run_id, "terminal run changed"))
    return out
