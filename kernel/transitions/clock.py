"""V-5: time regression fails closed (SPEC §1.10 V-5 with Appendix E-4; RUN-04).

A transition whose observation time is earlier than a durable time it depends on writes nothing:
`Rejected(CLOCK_REGRESSION)`. Each transition names the times it depends on (the Run's last
change, a lease's last change, the policy's); the start times of the Run and of its latest Attempt
count for every transition (E-4): a start time is a handle fact reported by an executor, so it can
be later than the transaction that recorded it, and a later transition observed before it would
otherwise finish an Attempt before it started.
"""

from __future__ import annotations

from kernel.entities import RunAggregate

__all__ = ["clock_regressed"]


def clock_regressed(aggregate: RunAggregate, observed_at_ms: int, *durable_ms: int) -> bool:
    """True when `observed_at_ms` is earlier than any of `durable_ms` or than the start time of
    the Run or of its latest Attempt (V-5, E-4)."""
    times = [*durable_ms, aggregate.run.started_at_ms or 0]
    latest = aggregate.latest_attempt
    if latest is not None and latest.started_at_ms is not None:
        times.append(latest.started_at_ms)
    return observed_at_ms < max(times)
