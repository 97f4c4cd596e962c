"""The control-plane dispatch lease expiry scanner's rules, pure (SPEC §3.16; INBOX-42).

One page per call (default 16, hard 64) of the lease-expiry source with one observation time,
items processed serially with `expire_with_lease` (T7..T10), one transaction each. The command
for an item is built from the aggregate loaded in that transaction (`expiry_command`): the
Attempt's current `leased` lease, so a lease renewed, completed or released since the page was
read is simply not expired. On the first failing item the scan stops, and the cursor returned
is the key of the contiguous successful prefix (`scan_cursor`): the failed item is processed
again next call and never skipped. No timer, no second page: the caller owns cadence and cursor.
"""

from __future__ import annotations

from kernel.commands import ExpireWithLease
from kernel.entities import RunAggregate
from kernel.specs.states import LeaseStatus, Profile


def expiry_command(
    aggregate: RunAggregate | None, attempt_id: str, profile: Profile
) -> ExpireWithLease | None:
    """T7..T10 for the Attempt's `leased` lease, or `None` when it has none any more."""
    if aggregate is None:
        return None
    for lease in aggregate.leases_of(attempt_id):
        if lease.status is LeaseStatus.LEASED:
            return ExpireWithLease(
                run_id=aggregate.run.run_id,
                attempt_id=attempt_id,
                lease_generation=lease.lease_generation,
                profile=profile,
            )
    return None


def scan_cursor(
    previous: tuple[int, str] | None, processed_keys: list[tuple[int, str]]
) -> tuple[int, str] | None:
    """The cursor after a call: the last key of the contiguous successful prefix, or the
    previous cursor when the first item failed."""
    return processed_keys[-1] if processed_keys else previous
