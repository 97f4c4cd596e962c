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

Contention (W-3, B-48, amended by Appendix E-2 and D-10), as pure functions over observed facts:

- `judge_contended_lock(recorded, observed, age_ns, window_ns)`: a lock held by someone else is
  reclaimed (`LockAction.RECLAIM`) when its owner is provably dead (E-2: a different boot id; or
  the same boot id and a PID that does not exist, is a zombie, or has a different start time) or
  when it is older than the stale window (W-3, strictly older: J-2); otherwise it is refused with
  `JOURNAL_LOCKED`. Nothing here reads `/proc`: the runner observes, the kernel decides.
- `moved_lock_action(judged, moved)`: after the rename (D-10), the moved lock is deleted only if
  it is the very lock that was judged (same owner id, mtime and inode); otherwise it is renamed
  back and the contender fails with `JOURNAL_LOCKED`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from kernel.specs.codes import Code
from kernel.specs.table import Table

__all__ = [
    "OWNERSHIP_TABLE",
    "REFUSAL_CODES",
    "HostObservation",
    "LockAction",
    "LockJudgment",
    "LockOwnerIdentity",
    "LockReason",
    "LockSnapshot",
    "MovedLockAction",
    "OwnershipState",
    "OwnershipTrigger",
    "ProcessPresence",
    "judge_contended_lock",
    "moved_lock_action",
    "next_ownership_state",
    "owner_provably_dead",
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


# -- contention: W-3, B-48, Appendix E-2 and D-10 ------------------------------------------------


@dataclass(frozen=True, slots=True)
class LockOwnerIdentity:
    """E-2: the identity a lock records beside its owner id.

    `start_time` is the process start time as the host reports it (Linux: `/proc/<pid>/stat`
    field 22, clock ticks after boot), comparable only within one boot. `pid_namespace` names the
    PID namespace the PID belongs to (Linux: the `/proc/self/ns/pid` link); a PID seen from another
    namespace proves nothing (two containers on one host share a boot id, not their PIDs).
    """

    boot_id: str
    pid: int
    start_time: int
    pid_namespace: str


class ProcessPresence(enum.StrEnum):
    """What the host says about the recorded PID now."""

    ABSENT = "absent"  # no process has that PID
    PRESENT = "present"  # a process has it; its start time was observed
    ZOMBIE = "zombie"  # exited, not yet reaped: it never runs again and holds no lock refresh
    UNKNOWN = "unknown"  # could not be observed (no /proc, no permission, unparsable)


@dataclass(frozen=True, slots=True)
class HostObservation:
    """E-2: what the contender's host observed now about the recorded owner.

    `boot_id` and `pid_namespace` are the contender's own (None: unreadable); `presence` and
    `start_time` describe the recorded PID as seen from the contender (`start_time` only when
    `presence` is `present` or `zombie`).
    """

    boot_id: str | None
    pid_namespace: str | None
    presence: ProcessPresence
    start_time: int | None = None


class LockAction(enum.StrEnum):
    """What a contender does with a lock it found held (W-3)."""

    RECLAIM = "reclaim"  # rename it away, then D-10's checks
    REFUSE = "refuse"  # fail `acquire()` with `JOURNAL_LOCKED`


class LockReason(enum.StrEnum):
    """Why (a stable word for evidence and tests; never carries the owner id)."""

    OWNER_OTHER_BOOT = "owner_other_boot"  # E-2: recorded under another boot
    OWNER_PROCESS_GONE = "owner_process_gone"  # E-2: no process with the recorded PID
    OWNER_PROCESS_ZOMBIE = "owner_process_zombie"  # E-2: the PID is a zombie of the owner
    OWNER_PID_REUSED = "owner_pid_reused"  # E-2: the PID belongs to a later process
    STALE_WINDOW_PASSED = "stale_window_passed"  # W-3: older than the stale window
    OWNER_MAY_BE_LIVE = "owner_may_be_live"  # not provably dead and within the window


@dataclass(frozen=True, slots=True)
class LockJudgment:
    """The answer for one contended lock: the action, why, and the refusal code if refused."""

    action: LockAction
    reason: LockReason
    code: Code | None


def owner_provably_dead(
    recorded: LockOwnerIdentity | None, observed: HostObservation
) -> LockReason | None:
    """E-2: the reason the recorded owner is provably dead, or None when it is not proven.

    Total and pure. Without a recorded identity, or with an observation that cannot decide (the
    contender's boot id unknown; the recorded PID in another PID namespace; the PID's state
    unknown), nothing is proven and the stale window applies.
    """
    if recorded is None or observed.boot_id is None:
        return None
    if recorded.boot_id != observed.boot_id:
        return LockReason.OWNER_OTHER_BOOT
    if observed.pid_namespace is None or recorded.pid_namespace != observed.pid_namespace:
        return None
    if observed.presence is ProcessPresence.ABSENT:
        return LockReason.OWNER_PROCESS_GONE
    if observed.presence is ProcessPresence.UNKNOWN or observed.start_time is None:
        return None
    if observed.start_time != recorded.start_time:
        return LockReason.OWNER_PID_REUSED
    if observed.presence is ProcessPresence.ZOMBIE:
        return LockReason.OWNER_PROCESS_ZOMBIE
    return None


def judge_contended_lock(
    recorded: LockOwnerIdentity | None,
    observed: HostObservation,
    *,
    age_ns: int,
    window_ns: int,
) -> LockJudgment:
    """W-3 amended by E-2: reclaim a lock whose owner is provably dead at once, or one strictly
    older than the stale window (J-2: nanoseconds, the lock mtime's own unit); refuse any other
    with `JOURNAL_LOCKED`. Total and pure."""
    dead = owner_provably_dead(recorded, observed)
    if dead is not None:
        return LockJudgment(LockAction.RECLAIM, dead, None)
    if age_ns > window_ns:
        return LockJudgment(LockAction.RECLAIM, LockReason.STALE_WINDOW_PASSED, None)
    return LockJudgment(LockAction.REFUSE, LockReason.OWNER_MAY_BE_LIVE, Code.JOURNAL_LOCKED)


@dataclass(frozen=True, slots=True)
class LockSnapshot:
    """A lock as a contender saw it: its owner id (None: unreadable), mtime and inode."""

    owner_id: bytes | None = field(repr=False)
    mtime_ns: int
    device: int
    inode: int


class MovedLockAction(enum.StrEnum):
    """D-10: what becomes of a lock renamed away by a contender."""

    DELETE = "delete"  # it is the stale lock judged: remove it, retry `mkdir` once
    RESTORE = "restore"  # it changed in between: rename it back, fail `JOURNAL_LOCKED`


def moved_lock_action(judged: LockSnapshot, moved: LockSnapshot) -> MovedLockAction:
    """D-10: delete the moved lock only if its owner id and mtime (and inode, J-4) equal the
    stale lock judged; an unreadable owner id on either side matches only an unreadable one."""
    if judged == moved:  # the dataclass compares every field, owner id included
        return MovedLockAction.DELETE
    return MovedLockAction.RESTORE
