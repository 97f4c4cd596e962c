"""The result of one cancellation-convergence page (SPEC §1.9, Appendix D-6, E-1).

A runner calls `converge_cancel` for each candidate of one `cancel_convergence_candidates` page,
each in its own transaction; how each candidate ended, and whether it stops the page, is decided
here, in the kernel, so the runner only sequences (ARCHITECTURE rule 1). The classification
follows the lost-retry page's (§1.8.2, E-5): a candidate that fails its re-check under its lock
(§0.3, D-3: the intent or the live execution changed, the Run ended meanwhile, or the database
time went back) is `raced`; any other refusal or a storage failure is `errored`, which a
fail-closed (cluster) page never counts: it stops the page before later candidates are touched.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.lost_retry_page import CandidateError
from kernel.outcomes import Applied, Outcome, Rejected, Replayed
from kernel.specs.codes import Code

#: §0.3 re-check rule for `converge_cancel`: the refusals a candidate can only meet because the
#: aggregate moved on between the source read and its lock (D-3).
CONVERGENCE_RACED_REJECTIONS = frozenset(
    {Code.NO_CANCEL_INTENT, Code.LIVE_EXECUTION, Code.CLOCK_REGRESSION}
)


@dataclass(frozen=True, slots=True)
class ConvergencePageResult:
    """One page: `(run_id, outcome kind, code)` per candidate in page order, and `has_more` of
    the source page. `converged + raced + errored = scanned`; `errored` is 0 on cluster."""

    outcomes: tuple[tuple[str, str, str], ...]
    dispositions: tuple[str, ...]
    has_more: bool

    @property
    def scanned(self) -> int:
        return len(self.outcomes)

    def count(self, disposition: str) -> int:
        return self.dispositions.count(disposition)


def classify_convergence(outcome: Outcome | CandidateError) -> str:
    """The page counter one candidate's `converge_cancel` outcome belongs to."""
    if isinstance(outcome, CandidateError):
        return "errored"
    if isinstance(outcome, Applied):
        return "converged"
    if isinstance(outcome, Replayed):
        return "raced"  # already terminal: another replica or a completion ended it first
    if isinstance(outcome, Rejected) and outcome.code in CONVERGENCE_RACED_REJECTIONS:
        return "raced"
    return "errored"


def stops_convergence_page(outcome: Outcome | CandidateError, *, fail_closed: bool) -> bool:
    """D-6 with E-5's rule: on a fail-closed (cluster) page every candidate that would count
    `errored` stops the page; a broken head candidate is never skipped to advance others."""
    return fail_closed and classify_convergence(outcome) == "errored"
