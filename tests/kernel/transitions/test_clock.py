"""Time regression fails closed (RUN-04, V-5)."""

from __future__ import annotations

import pytest

from kernel import Applied, Code, Raced, Rejected, Replayed, apply
from tests.support.explore import Exploration, explore


@pytest.fixture(scope="module")
def exploration() -> Exploration:
    return explore(4)


@pytest.mark.spec("RUN-04")
def test_an_earlier_observation_time_never_applies(exploration: Exploration) -> None:
    """RUN-04: for every transition that applied from a reachable state, the same command at a
    time before the durable time it depends on (the Run's last change; for a renew, the lease's
    last change) writes nothing: `CLOCK_REGRESSION`, or, where the guard itself is a time
    comparison, the candidate is not eligible yet (`not_expired`, `NOT_ELIGIBLE`)."""
    regressions = 0
    checked = 0
    for before, command, _at, outcome in exploration.edges:
        if before is None or not isinstance(outcome, Applied):
            continue
        if command.name == "renew_lease":
            lease = before.leased_lease(command.attempt_id)  # type: ignore[union-attr]
            assert lease is not None
            earlier = lease.updated_at_ms - 1
        else:
            earlier = before.run.updated_at_ms - 1
        again = apply(before, command, earlier)
        checked += 1
        assert not isinstance(again, Applied), command.name
        if again == Rejected(Code.CLOCK_REGRESSION):
            regressions += 1
        else:
            assert again in (Replayed(Code.NOT_EXPIRED), Raced(Code.NOT_ELIGIBLE)), (
                command.name,
                again,
            )
    assert checked > 1_000
    assert regressions > checked // 2
