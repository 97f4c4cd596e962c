"""The kernel's classification of one cancellation-convergence candidate (Appendix D-6 with
E-5's rule, §0.3 re-check rule): what a cluster page counts, and what stops it."""

from __future__ import annotations

from typing import Any, cast

import pytest

from kernel import (
    CANDIDATE_ERROR,
    Applied,
    Outcome,
    Rejected,
    Replayed,
    classify_convergence,
    stops_convergence_page,
)
from kernel.specs import Code


@pytest.mark.spec("E-1")
@pytest.mark.parametrize(
    ("outcome", "disposition"),
    [
        # Only the outcome's type and code are read; no aggregate is needed to classify it.
        (Applied(cast(Any, None), (), Code.CONVERGED), "converged"),
        (Replayed(Code.ALREADY_TERMINAL), "raced"),
        (Rejected(Code.NO_CANCEL_INTENT), "raced"),
        (Rejected(Code.LIVE_EXECUTION), "raced"),
        (Rejected(Code.CLOCK_REGRESSION), "raced"),
        (Rejected(Code.RUN_NOT_FOUND), "errored"),
    ],
)
def test_a_candidate_that_moved_on_is_raced_anything_else_stops_a_cluster_page(
    outcome: Outcome, disposition: str
) -> None:
    assert classify_convergence(outcome) == disposition
    assert stops_convergence_page(outcome, fail_closed=True) is (disposition == "errored")
    assert not stops_convergence_page(outcome, fail_closed=False)


def test_a_storage_failure_is_errored_and_stops_a_cluster_page() -> None:
    assert classify_convergence(CANDIDATE_ERROR) == "errored"
    assert stops_convergence_page(CANDIDATE_ERROR, fail_closed=True)
