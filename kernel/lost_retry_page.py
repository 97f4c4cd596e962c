"""The result of one lost-retry page (SPEC §1.8.2; RETRY-13, RETRY-14, RETRY-17).

A runner drives `lost_retry_step` over one page of candidates; how each candidate ended is
tallied here, in the kernel, so that every runner reports the same counts for the same outcomes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import icontract

from kernel.outcomes import Applied, Outcome, Raced, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.limits import PAGE_SIZE_MAX

# §0.3 re-check rule: a candidate that no longer passes under its lock is `raced`, including a
# kernel `NOT_DUE` or `CLOCK_REGRESSION` met on the re-read (D-3, R6).
RACED_REJECTIONS = frozenset({Code.NOT_DUE, Code.CLOCK_REGRESSION})


@dataclass(frozen=True, slots=True)
class LostRetryPageResult:
    """`scheduled + requeued + failed + raced + errored = scanned <= limit` (RETRY-14); a
    fail-closed (cluster) page never counts `errored` (E-5: `stops_page`)."""

    scanned: int
    scheduled: int
    requeued: int
    failed: int
    raced: int
    errored: int
    has_more: bool

    @property
    def balanced(self) -> bool:
        return (
            self.scheduled + self.requeued + self.failed + self.raced + self.errored == self.scanned
        )


class CandidateError:
    """Marks a candidate whose transaction failed in storage (database, lock or persistence
    error, or an unreadable aggregate). Local pages count it as `errored` and go on; cluster
    pages never produce one: they stop closed first (RETRY-17)."""

    __slots__ = ()


CANDIDATE_ERROR = CandidateError()


def classify(outcome: Outcome | CandidateError) -> str:
    """The page counter one candidate's outcome belongs to."""
    if isinstance(outcome, CandidateError):
        return "errored"
    if isinstance(outcome, Applied):
        if outcome.code is Code.SCHEDULED:
            return "scheduled"
        if outcome.code is Code.REQUEUED:
            return "requeued"
        return "failed"
    if isinstance(outcome, Raced):
        return "raced"
    if isinstance(outcome, Rejected) and outcome.code in RACED_REJECTIONS:
        return "raced"
    if isinstance(outcome, Replayed):
        return "raced"
    return "errored"


def stops_page(outcome: Outcome | CandidateError, *, fail_closed: bool) -> bool:
    """RETRY-17 with Appendix E-5: on a fail-closed (cluster) page every candidate that would be
    counted `errored` stops the page before later candidates are touched: a storage failure, and
    as much a kernel refusal that is neither a decision nor a race (`ATTEMPT_ID_CONFLICT`, a new
    Attempt id that collides). So `errored` is always 0 on cluster; a local page counts it and
    goes on."""
    return fail_closed and classify(outcome) == "errored"


@icontract.require(lambda limit: 1 <= limit <= PAGE_SIZE_MAX)
@icontract.ensure(lambda result, limit: result.balanced and result.scanned <= limit)
def tally(
    outcomes: Iterable[Outcome | CandidateError], *, limit: int, has_more: bool
) -> LostRetryPageResult:
    """Count one page. More outcomes than `limit` is a caller bug (P-2) and fails the contract."""
    counts = {"scheduled": 0, "requeued": 0, "failed": 0, "raced": 0, "errored": 0}
    scanned = 0
    for outcome in outcomes:
        scanned += 1
        counts[classify(outcome)] += 1
    return LostRetryPageResult(scanned=scanned, has_more=has_more, **counts)
