"""Allowed-transition tables, one literal mapping per machine (ARCHITECTURE rule 2).

Each table maps `(from status, command name)` to the set of statuses the entity may hold after an
`Applied` outcome of that command. A pair that is absent is never applied: the transition returns
`Rejected`, `Replayed` or `Raced` and writes nothing.
- Run table: every applied command on an existing Run is a pair, even one that keeps its status.
- Attempt table: the latest Attempt before the command (the one every command addresses), with
  its status afterwards, changed or not.
- Lease table: only lease rows a command changes (most commands leave leases alone). Creation edges (admission, a retry Attempt, a grant) are listed in
the `*_INITIAL` maps. Read them like h11's `_state.py`: this is the whole legal surface.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from kernel.specs.states import AttemptStatus as A
from kernel.specs.states import LeaseStatus as L
from kernel.specs.states import RunStatus as R

_OUTCOMES_R: Final = frozenset({R.SUCCEEDED, R.FAILED, R.CANCELLED, R.TIMED_OUT})
_OUTCOMES_A: Final = frozenset({A.SUCCEEDED, A.FAILED, A.CANCELLED, A.TIMED_OUT})
_CANCEL_R: Final = frozenset({R.CANCELLED, R.TIMED_OUT})
_CANCEL_A: Final = frozenset({A.CANCELLED, A.TIMED_OUT})


def _same(*states: R) -> dict[R, frozenset[R]]:
    return {s: frozenset({s}) for s in states}


# fmt: off
RUN_TRANSITIONS: Final[Mapping[tuple[R, str], frozenset[R]]] = MappingProxyType({
    # §1.7 dispatch, start, completion, expiry
    (R.QUEUED, "grant_lease"):                 frozenset({R.DISPATCHING}),               # T1
    (R.DISPATCHING, "acknowledge_starting"):   frozenset({R.DISPATCHING}),               # T2
    (R.DISPATCHING, "renew_lease"):            frozenset({R.DISPATCHING}),               # T3
    (R.RUNNING, "renew_lease"):                frozenset({R.RUNNING}),                   # T3
    (R.DISPATCHING, "acknowledge_running"):    frozenset({R.RUNNING}),                   # T4
    (R.DISPATCHING, "fail_start"):             frozenset({R.FAILED}),                    # T5
    (R.DISPATCHING, "complete_with_lease"):    _OUTCOMES_R,                              # T6
    (R.RUNNING, "complete_with_lease"):        _OUTCOMES_R,                              # T6
    (R.DISPATCHING, "expire_with_lease"):      frozenset({R.QUEUED, R.LOST, R.DISPATCHING}),  # T7 T8 T9
    (R.RUNNING, "expire_with_lease"):          frozenset({R.LOST, R.RUNNING}),           # T8 T9
    # §1.7 local executor path
    (R.QUEUED, "activate_local"):              frozenset({R.DISPATCHING}),               # L1
    (R.DISPATCHING, "record_local_handle"):    frozenset({R.RUNNING}),                   # L2
    (R.DISPATCHING, "complete_local"):         _OUTCOMES_R,                              # L3
    (R.RUNNING, "complete_local"):             _OUTCOMES_R,                              # L3
    (R.RUNNING, "record_local_stop"):          _CANCEL_R,                                # L4 L5
    # §1.8 lost retry
    (R.LOST, "lost_retry_step"):               frozenset({R.RETRY_WAIT, R.FAILED}),      # R1-R4
    (R.RETRY_WAIT, "lost_retry_step"):         frozenset({R.QUEUED, R.FAILED}),          # R1-R3, R5
    # §1.9 cancellation
    **{(s, "request_cancel"): frozenset({s}) for s in (
        R.CREATED, R.QUEUED, R.DISPATCHING, R.RUNNING, R.LOST, R.RETRY_WAIT)},
    **{(s, "converge_cancel"): _CANCEL_R for s in (
        R.CREATED, R.QUEUED, R.DISPATCHING, R.LOST, R.RETRY_WAIT)},
    # §2.2 local startup recovery, §2.3 cluster runtime recovery
    (R.DISPATCHING, "recover_local_startup"):  _OUTCOMES_R | {R.LOST},
    (R.RUNNING, "recover_local_startup"):      _OUTCOMES_R | {R.LOST},
    (R.CREATED, "fail_orphaned_created"):      frozenset({R.FAILED}),
    (R.DISPATCHING, "recover_runtime"):        _OUTCOMES_R | {R.LOST, R.QUEUED},
    (R.RUNNING, "recover_runtime"):            _OUTCOMES_R | {R.LOST},
})

RUN_INITIAL: Final[Mapping[str, R]] = MappingProxyType({
    "admit_run": R.QUEUED,
    "create_run": R.CREATED,  # two-phase admission, B-07
})

ATTEMPT_TRANSITIONS: Final[Mapping[tuple[A, str], frozenset[A]]] = MappingProxyType({
    (A.CLAIMED, "grant_lease"):                frozenset({A.CLAIMED}),                   # T1
    (A.CLAIMED, "acknowledge_starting"):       frozenset({A.STARTING}),                  # T2
    (A.STARTING, "renew_lease"):               frozenset({A.STARTING}),                  # T3
    (A.RUNNING, "renew_lease"):                frozenset({A.RUNNING}),                   # T3
    (A.STARTING, "acknowledge_running"):       frozenset({A.RUNNING}),                   # T4
    (A.STARTING, "fail_start"):                frozenset({A.FAILED}),                    # T5
    (A.STARTING, "complete_with_lease"):       _OUTCOMES_A,                              # T6
    (A.RUNNING, "complete_with_lease"):        _OUTCOMES_A,                              # T6
    (A.CLAIMED, "expire_with_lease"):          frozenset({A.CLAIMED}),                   # T7
    (A.STARTING, "expire_with_lease"):         frozenset({A.LOST, A.STARTING}),          # T8 T9
    (A.RUNNING, "expire_with_lease"):          frozenset({A.LOST, A.RUNNING}),           # T8 T9
    (A.CLAIMED, "activate_local"):             frozenset({A.STARTING}),                  # L1
    (A.STARTING, "record_local_handle"):       frozenset({A.RUNNING}),                   # L2
    (A.STARTING, "complete_local"):            _OUTCOMES_A,                              # L3
    (A.RUNNING, "complete_local"):             _OUTCOMES_A,                              # L3
    (A.RUNNING, "record_local_stop"):          _CANCEL_A,                                # L4 L5
    (A.LOST, "lost_retry_step"):               frozenset({A.LOST}),                      # R1-R5
    **{(s, "request_cancel"): frozenset({s}) for s in (
        A.CLAIMED, A.STARTING, A.RUNNING, A.LOST)},
    (A.CLAIMED, "converge_cancel"):            _CANCEL_A,
    (A.LOST, "converge_cancel"):               frozenset({A.LOST}),
    (A.STARTING, "recover_local_startup"):     _OUTCOMES_A | {A.LOST},
    (A.RUNNING, "recover_local_startup"):      _OUTCOMES_A | {A.LOST},
    (A.CLAIMED, "recover_runtime"):            frozenset({A.CLAIMED}),                   # as T7
    (A.STARTING, "recover_runtime"):           _OUTCOMES_A | {A.LOST},
    (A.RUNNING, "recover_runtime"):            _OUTCOMES_A | {A.LOST},
})

ATTEMPT_INITIAL: Final[Mapping[str, A]] = MappingProxyType({
    "admit_run": A.CLAIMED,        # Attempt 1
    "lost_retry_step": A.CLAIMED,  # R5: Attempt N+1
})

LEASE_TRANSITIONS: Final[Mapping[tuple[L, str], frozenset[L]]] = MappingProxyType({
    (L.LEASED, "acknowledge_starting"):        frozenset({L.LEASED}),                    # T2
    (L.LEASED, "renew_lease"):                 frozenset({L.LEASED}),                    # T3
    (L.LEASED, "acknowledge_running"):         frozenset({L.LEASED}),                    # T4
    (L.LEASED, "fail_start"):                  frozenset({L.RELEASED}),                  # T5
    (L.LEASED, "complete_with_lease"):         frozenset({L.COMPLETED}),                 # T6
    (L.LEASED, "expire_with_lease"):           frozenset({L.RELEASED}),                  # T7 T8 T9
    (L.LEASED, "converge_cancel"):             frozenset({L.RELEASED}),                  # §1.9
    (L.LEASED, "recover_runtime"):             frozenset({L.RELEASED}),                  # §2.4
})

LEASE_INITIAL: Final[Mapping[str, L]] = MappingProxyType({
    "grant_lease": L.LEASED,  # T1, version 1 (V-2)
})
# fmt: on
