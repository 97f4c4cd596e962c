"""Journal ownership rules (SPEC §3.9 W-1..W-7, ADR-0021 §4) as data.

The states and the allowed transitions of one owner of a journal root. The lock itself (a directory,
its mtime, the refresh timer) is I/O and lives in `runners/worker/journal/lock.py`; this module only
says which state follows which and what an operation fails with when ownership is not held.

- `OWNERSHIP_TABLE` (a `Table`) maps `(state, trigger)` to the next state. A missing pair changes
  nothing: the operation that would have caused it fails with `REFUSAL_CODES[state]` (or, for a
  failed `acquire()`, with its own code) and the state stays.
- `compromised` is absorbing (W-6): no pair leaves it, so there is no automatic re-acquire.
- `released` may acquire again (a new tenure with a new owner id); `unowned` and `released` refuse
  every operation with `JOURNAL_NOT_OWNED` (W-1), `compromised` with `JOURNAL_COMPROMISED` (W-6).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from kernel.specs.codes import Code
from kernel.specs.table import Table

__all__ = [
    "OWNERSHIP_TABLE",
    "REFUSAL_CODES",
    "OwnershipState",
    "OwnershipTrigger",
    "next_ownership_state",
]


class OwnershipState(enum.StrEnum):
    """Ownership states of one journal owner (SPEC §3.9)."""

    UNOWNED = "unowned"
    OWNED = "owned"
    COMPROMISED = "compromised"
    RELEASED = "released"


class OwnershipTrigger(enum.StrEnum):
    """What happened to the lock."""

    ACQUIRED = "acquired"  # W-2/W-3: the lock directory was created by this owner
    VERIFIED = "verified"  # W-5: a verification or a refresh succeeded
    VERIFICATION_FAILED = "verification_failed"  # W-5: any check failed, or a refresh failed
    RELEASED = "released"  # W-7: verified, then the owner file and lock directory were removed


# fmt: off
OWNERSHIP_TABLE: Final = Table.of("Journal ownership", OwnershipState, OwnershipTrigger, {
    OwnershipState.UNOWNED: {
        OwnershipTrigger.ACQUIRED:             OwnershipState.OWNED,        # W-2
    },
    OwnershipState.OWNED: {
        OwnershipTrigger.VERIFIED:             OwnershipState.OWNED,        # W-5
        OwnershipTrigger.VERIFICATION_FAILED:  OwnershipState.COMPROMISED,  # W-5
        OwnershipTrigger.RELEASED:             OwnershipState.RELEASED,     # W-7
    },
    OwnershipState.COMPROMISED: {},                                         # W-6: absorbing
    OwnershipState.RELEASED: {
        OwnershipTrigger.ACQUIRED:             OwnershipState.OWNED,        # a new tenure
    },
})
# fmt: on

#: The code every journal operation fails with in a state that is not `owned` (`release()` too,
#: except that a second `release()` in `released` does nothing).
REFUSAL_CODES: Final[Mapping[OwnershipState, Code]] = MappingProxyType(
    {
        OwnershipState.UNOWNED: Code.JOURNAL_NOT_OWNED,
        OwnershipState.RELEASED: Code.JOURNAL_NOT_OWNED,
        OwnershipState.COMPROMISED: Code.JOURNAL_COMPROMISED,
    }
)


def next_ownership_state(state: OwnershipState, trigger: OwnershipTrigger) -> OwnershipState | None:
    """The state after `trigger` in `state`, or None when the pair is missing (total, pure)."""
    return OWNERSHIP_TABLE.successor(state, trigger)
