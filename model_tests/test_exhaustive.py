"""Exhaustive small scope (issue 3, item 2): one Run, two Workers, a bounded clock."""

from __future__ import annotations

import pytest

from model_tests.exhaustive import explore

pytestmark = pytest.mark.slow  # the exhaustive small scope (about 25 s)


@pytest.mark.spec("RUN-01", "RUN-02", "RUN-05", "RUN-08", "LEASE-02", "LEASE-05", "LEASE-12")
def test_every_reachable_state_keeps_every_invariant() -> None:
    """Breadth-first over every state reachable within one lease duration: I-1..I-9 in every
    state; V-1..V-4, I-5, fence codes, the expiry rows and the lost-retry table on every
    transition (a violation raises). The scope is large enough to reach every Run status,
    including `lost`, `retry_wait` and a second Attempt."""
    result = explore()
    print(f"\n{result.summary()}")
    assert result.states >= 5_000
    assert result.max_attempts == 2
    reached = set(result.statuses)
    assert reached >= {
        "queued",
        "dispatching",
        "running",
        "lost",
        "retry_wait",
        "succeeded",
        "failed",
        "cancelled",
        "timed_out",
    }
    assert result.outcomes["lost_retry_step applied failed_exhausted"] > 0
    assert result.outcomes["lost_retry_step applied requeued"] > 0
    # Appendix E-1: cancel while started, the lease expires (T9), convergence applies.
    assert result.outcomes["E-1 applied converged"] > 0
    # Decision R-27: a local completion under an intent, both a failed and a succeeded one.
    assert result.outcomes["R-27 failed under intent"] > 0
    assert result.outcomes["R-27 succeeded under intent"] > 0
    assert result.invariant_checks > result.transitions
