"""The journal ownership rules as data (SPEC §3.9 W-1, W-6, ownership states)."""

from __future__ import annotations

import itertools

from kernel.specs.codes import Code
from kernel.specs.journal_ownership import (
    OWNERSHIP_TRANSITIONS,
    REFUSAL_CODES,
    OwnershipState,
    OwnershipTrigger,
    next_ownership_state,
)

S, T = OwnershipState, OwnershipTrigger


def test_the_four_states_of_the_spec() -> None:
    assert [s.value for s in S] == ["unowned", "owned", "compromised", "released"]


def test_the_transition_table() -> None:
    assert dict(OWNERSHIP_TRANSITIONS) == {
        (S.UNOWNED, T.ACQUIRED): S.OWNED,
        (S.RELEASED, T.ACQUIRED): S.OWNED,
        (S.OWNED, T.VERIFIED): S.OWNED,
        (S.OWNED, T.VERIFICATION_FAILED): S.COMPROMISED,
        (S.OWNED, T.RELEASED): S.RELEASED,
    }


def test_compromised_is_absorbing_and_only_owned_can_be_compromised_or_released() -> None:
    assert not [key for key in OWNERSHIP_TRANSITIONS if key[0] is S.COMPROMISED]  # W-6
    assert {s for (s, _), after in OWNERSHIP_TRANSITIONS.items() if after is S.COMPROMISED} == {
        S.OWNED
    }
    assert {s for (s, t) in OWNERSHIP_TRANSITIONS if t is not T.ACQUIRED} == {S.OWNED}


def test_next_state_is_total_and_reads_the_table() -> None:
    for state, trigger in itertools.product(S, T):
        assert next_ownership_state(state, trigger) == OWNERSHIP_TRANSITIONS.get((state, trigger))


def test_every_state_but_owned_refuses_with_its_code() -> None:
    assert dict(REFUSAL_CODES) == {
        S.UNOWNED: Code.JOURNAL_NOT_OWNED,
        S.RELEASED: Code.JOURNAL_NOT_OWNED,
        S.COMPROMISED: Code.JOURNAL_COMPROMISED,
    }
