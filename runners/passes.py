"""Pass-level operations shared by every store: one bounded page of a source, then one short
transaction per candidate through the engine (SPEC §1.8.2, P-rules). No domain rule lives here:
selection order and eligibility are the store's query (checked against `kernel.selection`), the
decision is the kernel's, the counts are `kernel.lost_retry_page.tally`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kernel import (
    CANDIDATE_ERROR,
    Candidate,
    CandidateError,
    Evidence,
    ExpireWithLease,
    LostRetryPageResult,
    LostRetryStep,
    Outcome,
    Page,
    Profile,
    RecoverRuntime,
    RunAggregate,
    check_limit,
    expiry_command,
    scan_cursor,
    stops_page,
    tally,
)
from kernel.specs import Code
from runners.engine import Storage, execute, execute_built


class LostRetrySource(Protocol):
    def lost_retry_candidates(
        self, observed_at_ms: int, limit: int
    ) -> Page[tuple[int, int, int, str]]:
        """One bounded query (`limit + 1` rows) in §1.8.2 order, eligible at the time (P-6)."""
        ...


class LostRetryUnavailable(Exception):
    """Cluster: a candidate failed, so the page stopped closed and the cycle must stop
    (RETRY-17, O-5). Carries the stable code and the counts so far, never exception text."""

    code = Code.LOST_RETRY_UNAVAILABLE

    def __init__(self, partial: LostRetryPageResult) -> None:
        super().__init__(f"{self.code}: page stopped after {partial.scanned} candidates")
        self.partial = partial


def lost_retry_page(
    storage: Storage,
    source: LostRetrySource,
    observed_at_ms: int,
    limit: int,
    new_attempt_id: Callable[[str], str],
    *,
    fail_closed: bool,
) -> LostRetryPageResult:
    """Run one lost-retry page with one observation time (P-5). Local (`fail_closed=False`): a
    failing candidate is left unchanged, counted `errored`, and the page goes on. Cluster
    (`fail_closed=True`): the first candidate the kernel's `stops_page` names (a storage failure,
    or an `errored` refusal such as `ATTEMPT_ID_CONFLICT`, E-5) stops the page before later
    candidates are touched (RETRY-17). `new_attempt_id(run_id)` supplies the id a requeue would
    use (ids are inputs)."""
    check_limit(limit)
    page = source.lost_retry_candidates(observed_at_ms, limit)
    outcomes: list[Outcome | CandidateError] = []
    for candidate in page.items:
        command = LostRetryStep(
            run_id=candidate.run_id, new_attempt_id=new_attempt_id(candidate.run_id)
        )
        outcome: Outcome | CandidateError
        try:
            outcome = execute(storage, command, observed_at_ms)
        except Exception:  # storage, lock or persistence failure of this candidate
            outcome = CANDIDATE_ERROR
        if stops_page(outcome, fail_closed=fail_closed):  # the kernel says (RETRY-17, E-5)
            raise LostRetryUnavailable(tally(outcomes, limit=limit, has_more=page.has_more))
        outcomes.append(outcome)
    return tally(outcomes, limit=limit, has_more=page.has_more)


@dataclass(frozen=True, slots=True)
class RecoveryPageResult:
    """One runtime recovery page (§2.3): what each candidate's transaction returned, as
    `(attempt_id, outcome kind, code)` in page order, and `has_more` of the source page."""

    outcomes: tuple[tuple[str, str, str], ...]
    has_more: bool

    @property
    def scanned(self) -> int:
        return len(self.outcomes)

    def count(self, kind: str, code: str | None = None) -> int:
        return sum(1 for _, k, c in self.outcomes if k == kind and (code is None or c == code))


class RecoverySource(Protocol):
    def runtime_recovery_candidates(
        self, observed_at_ms: int, limit: int
    ) -> Page[tuple[int, int, str]]: ...


#: The evidence port of §2.1 (receipt first, then identity): one `Evidence` value for one
#: candidate, obtained before its transaction so that no probe runs under a row lock.
EvidencePort = Callable[[Candidate[tuple[int, int, str]]], Evidence]


class RuntimeRecoveryUnavailable(Exception):
    """Cluster: a recovery candidate failed, so the page stopped and the cycle must not
    schedule (§2.3 step 4, REC-13). Carries the stable code and the outcomes so far."""

    code = Code.RUNTIME_RECOVERY_UNAVAILABLE

    def __init__(self, partial: RecoveryPageResult) -> None:
        super().__init__(f"{self.code}: page stopped after {partial.scanned} candidates")
        self.partial = partial


def runtime_recovery_page(
    storage: Storage,
    source: RecoverySource,
    observed_at_ms: int,
    limit: int,
    evidence: EvidencePort,
) -> RecoveryPageResult:
    """One page of the cluster runtime recovery source (§2.3) with one observation time: per
    candidate, its evidence, then one short transaction (`RecoverRuntime`; the store takes the
    Attempt advisory lock and the row locks, the kernel re-checks the selection under them).
    Any error, in the evidence port or the transaction, stops the page closed
    (`RUNTIME_RECOVERY_UNAVAILABLE`); later candidates are not touched. No cursor is kept."""
    check_limit(limit)
    page = source.runtime_recovery_candidates(observed_at_ms, limit)
    done: list[tuple[str, str, str]] = []
    for candidate in page.items:
        assert candidate.attempt_id is not None
        try:
            command = RecoverRuntime(
                run_id=candidate.run_id,
                attempt_id=candidate.attempt_id,
                evidence=evidence(candidate),
            )
            outcome = execute(storage, command, observed_at_ms)
        except Exception:  # evidence, storage, lock or persistence failure
            raise RuntimeRecoveryUnavailable(
                RecoveryPageResult(tuple(done), page.has_more)
            ) from None
        done.append((candidate.attempt_id, outcome.kind.value, outcome.code.value))
    return RecoveryPageResult(tuple(done), page.has_more)


@dataclass(frozen=True, slots=True)
class ExpiryPageResult:
    """One lease-expiry scan call (§3.16): each processed item's `(attempt_id, kind, code)`
    in order (`skipped` when its lease was no longer `leased`), the next cursor (the
    contiguous successful prefix), whether a failure stopped the page, and `has_more`."""

    outcomes: tuple[tuple[str, str, str], ...]
    cursor: tuple[int, str] | None
    failed: bool
    has_more: bool


class ExpirySource(Protocol):
    def lease_expiry_candidates(
        self, observed_at_ms: int, limit: int, after: tuple[int, str] | None = None
    ) -> Page[tuple[int, str]]: ...


def lease_expiry_page(
    storage: Storage,
    source: ExpirySource,
    observed_at_ms: int,
    limit: int,
    after: tuple[int, str] | None,
    *,
    profile: Profile,
) -> ExpiryPageResult:
    """One page of the expiry scanner (INBOX-42): serial items, one transaction each, stop at
    the first failure with the cursor of the successful prefix (the failed item comes back)."""
    check_limit(limit)
    page = source.lease_expiry_candidates(observed_at_ms, limit, after)
    done: list[tuple[str, str, str]] = []
    keys: list[tuple[int, str]] = []
    for candidate in page.items:
        attempt_id = candidate.attempt_id
        assert attempt_id is not None

        def build(
            aggregate: RunAggregate | None, attempt_id: str = attempt_id
        ) -> ExpireWithLease | None:
            return expiry_command(aggregate, attempt_id, profile)

        try:
            outcome = execute_built(storage, attempt_id, build, observed_at_ms)
        except Exception:  # storage, lock or persistence failure: stop, never skip
            return ExpiryPageResult(
                tuple(done), scan_cursor(after, keys), failed=True, has_more=True
            )
        if outcome is None:
            done.append((attempt_id, "skipped", "not_leased"))
        else:
            done.append((attempt_id, outcome.kind.value, outcome.code.value))
        keys.append(candidate.key)
    return ExpiryPageResult(tuple(done), scan_cursor(after, keys), False, page.has_more)
