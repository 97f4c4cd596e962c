"""The journal ownership rules as data (SPEC §3.9 W-1, W-6, ownership states).

That the real lock (`runners/worker/journal/lock.py`) takes exactly these edges and refuses every
other pair is walked in `tests/test_state_tables.py`.
"""

from __future__ import annotations

from kernel.specs.codes import Code
from kernel.specs.journal_ownership import (
    OWNERSHIP_TABLE,
    REFUSAL_CODES,
    OwnershipState,
    OwnershipTrigger,
    next_ownership_state,
)


def test_the_four_states_of_the_spec() -> None:
    assert [s.value for s in OwnershipState] == ["unowned", "owned", "compromised", "released"]


def test_the_transition_table() -> None:
    assert {(e.source, e.trigger, e.target) for e in OWNERSHIP_TABLE.edges()} == {
        (OwnershipState.UNOWNED, OwnershipTrigger.ACQUIRED, OwnershipState.OWNED),
        (OwnershipState.RELEASED, OwnershipTrigger.ACQUIRED, OwnershipState.OWNED),
        (OwnershipState.OWNED, OwnershipTrigger.VERIFIED, OwnershipState.OWNED),
        (OwnershipState.OWNED, OwnershipTrigger.VERIFICATION_FAILED, OwnershipState.COMPROMISED),
        (OwnershipState.OWNED, OwnershipTrigger.RELEASED, OwnershipState.RELEASED),
    }


def test_compromised_is_absorbing_and_only_owned_can_be_compromised_or_released() -> None:
    edges = OWNERSHIP_TABLE.edges()
    assert not [e for e in edges if e.source is OwnershipState.COMPROMISED]  # W-6
    assert {e.source for e in edges if e.target is OwnershipState.COMPROMISED} == {
        OwnershipState.OWNED
    }
    assert {e.source for e in edges if e.trigger is not OwnershipTrigger.ACQUIRED} == {
        OwnershipState.OWNED
    }


def test_the_helper_answers_a_missing_pair_with_none() -> None:
    """The lock's helper: the one next state of a row, None for a missing pair."""
    assert next_ownership_state(OwnershipState.RELEASED, OwnershipTrigger.ACQUIRED) is (
        OwnershipState.OWNED
    )
    assert next_ownership_state(OwnershipState.COMPROMISED, OwnershipTrigger.ACQUIRED) is None


def test_every_state_but_owned_refuses_with_its_code() -> None:
    assert dict(REFUSAL_CODES) == {
        OwnershipState.UNOWNED: Code.JOURNAL_NOT_OWNED,
        OwnershipState.RELEASED: Code.JOURNAL_NOT_OWNED,
        OwnershipState.COMPROMISED: Code.JOURNAL_COMPROMISED,
    }
