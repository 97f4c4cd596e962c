"""The `Table` type (`kernel/specs/table.py`) and the shape of the Run-side tables.

Whether the real code obeys each table, edge by edge and missing pair by missing pair, is
`tests/test_state_tables.py`; here: what a `Table` answers, what it refuses to be built from,
and the facts of the Run, Attempt and lease tables that read straight off the SPEC.
"""

from __future__ import annotations

import enum
from typing import Any

import pytest

from kernel.specs.states import AttemptStatus, LeaseStatus, RunStatus
from kernel.specs.table import NONE_LABEL, Edge, Table
from kernel.specs.tables import ATTEMPT_TABLE, LEASE_TABLE, RUN_TABLE, CommandName


class Door(enum.StrEnum):
    OPEN = "open"
    SHUT = "shut"
    LOCKED = "locked"


class Push(enum.StrEnum):
    OPEN = "open"
    CLOSE = "close"
    LOCK = "lock"
    BREAK = "break"


# fmt: off
DOOR = Table.of("Door", Door, Push, {
    None: {
        Push.CLOSE:  Door.SHUT,                 # built shut
    },
    Door.OPEN: {
        Push.CLOSE:  Door.SHUT,
        Push.BREAK:  None,                      # deletion
    },
    Door.SHUT: {
        Push.OPEN:   Door.OPEN,
        Push.LOCK:   {Door.LOCKED, Door.SHUT},  # the bolt may not catch
    },
    Door.LOCKED: {},
})
# fmt: on


def test_lookup_and_allows_read_the_rows() -> None:
    assert DOOR.lookup(Door.SHUT, Push.LOCK) == frozenset({Door.LOCKED, Door.SHUT})
    assert DOOR.lookup(Door.OPEN, Push.BREAK) == frozenset({None})
    assert DOOR.lookup(None, Push.CLOSE) == frozenset({Door.SHUT})
    assert DOOR.lookup(Door.LOCKED, Push.OPEN) is None
    assert DOOR.allows(Door.SHUT, Push.LOCK, Door.SHUT)
    assert not DOOR.allows(Door.SHUT, Push.LOCK, Door.OPEN)
    assert not DOOR.allows(Door.LOCKED, Push.OPEN, Door.OPEN)
    assert DOOR.allows(Door.OPEN, Push.BREAK, None)


def test_successor_is_the_one_target_or_none() -> None:
    assert DOOR.successor(Door.OPEN, Push.CLOSE) is Door.SHUT
    assert DOOR.successor(Door.LOCKED, Push.OPEN) is None
    with pytest.raises(ValueError, match="2 targets"):
        DOOR.successor(Door.SHUT, Push.LOCK)
    with pytest.raises(ValueError, match="deletes"):
        DOOR.successor(Door.OPEN, Push.BREAK)


def test_edges_creation_deletion_and_order() -> None:
    """One edge per (row, target), rows in literal order, targets in enum order."""
    assert DOOR.edges() == (
        Edge(None, Push.CLOSE, Door.SHUT),
        Edge(Door.OPEN, Push.CLOSE, Door.SHUT),
        Edge(Door.OPEN, Push.BREAK, None),
        Edge(Door.SHUT, Push.OPEN, Door.OPEN),
        Edge(Door.SHUT, Push.LOCK, Door.SHUT),
        Edge(Door.SHUT, Push.LOCK, Door.LOCKED),
    )
    assert DOOR.sources == (None, Door.OPEN, Door.SHUT, Door.LOCKED)


def test_missing_pairs_are_every_declared_pair_not_a_row() -> None:
    missing = DOOR.missing()
    assert len(missing) == len(DOOR.sources) * len(Push) - len(DOOR.rows)
    assert (None, Push.OPEN) in missing  # nothing but `close` creates a door
    assert (Door.LOCKED, Push.OPEN) in missing
    assert not set(missing) & set(DOOR.rows)
    assert missing[0] == (None, Push.OPEN)  # sources, then triggers, in declaration order


def test_a_table_without_creation_rows_has_no_none_source() -> None:
    plain = Table.of("Plain", Door, Push, {Door.OPEN: {Push.CLOSE: Door.SHUT}})
    assert plain.sources == tuple(Door)
    assert all(source is not None for source, _trigger in plain.missing())


def test_mermaid_groups_triggers_per_arrow() -> None:
    assert DOOR.mermaid().splitlines() == [
        "stateDiagram-v2",
        f"    {NONE_LABEL} --> shut: close",
        f"    open --> {NONE_LABEL}: break",
        "    open --> shut: close",
        "    shut --> locked: lock",
        "    shut --> open: open",
        "    shut --> shut: lock",
    ]


def test_a_literal_outside_the_declared_enums_is_refused() -> None:
    """mypy refuses these literals too; `Table.of` checks again at import, for data that
    reaches it untyped."""
    bad: list[tuple[str, Any]] = [
        ("source", {Push.OPEN: {Push.OPEN: Door.OPEN}}),
        ("trigger", {Door.OPEN: {Door.SHUT: Door.OPEN}}),
        ("unknown state", {Door.OPEN: {Push.OPEN: Push.LOCK}}),
        ("no target", {Door.OPEN: {Push.OPEN: set()}}),
    ]
    for message, literal in bad:
        with pytest.raises(ValueError, match=message):
            Table.of("Bad", Door, Push, literal)


def test_tables_are_read_only() -> None:
    with pytest.raises(TypeError):
        RUN_TABLE.rows[(RunStatus.SUCCEEDED, CommandName.ADMIT_RUN)] = frozenset()  # type: ignore[index]


# -- the Run-side tables -------------------------------------------------------------------------
def test_final_statuses_have_no_way_out() -> None:
    """§1.4: a terminal Run, Attempt or lease never changes again (RUN-08 for Attempts)."""
    finals: dict[str, set[Any]] = {
        RUN_TABLE.name: {
            RunStatus.SUCCEEDED,
            RunStatus.FAILED,
            RunStatus.CANCELLED,
            RunStatus.TIMED_OUT,
        },
        ATTEMPT_TABLE.name: {
            AttemptStatus.SUCCEEDED,
            AttemptStatus.FAILED,
            AttemptStatus.CANCELLED,
            AttemptStatus.TIMED_OUT,
        },
        LEASE_TABLE.name: {LeaseStatus.COMPLETED, LeaseStatus.RELEASED},
    }
    for table in (RUN_TABLE, ATTEMPT_TABLE, LEASE_TABLE):
        assert {s for s, _t in table.rows if s is not None} & finals[table.name] == set()
        assert finals[table.name] <= set(table.states)


def test_creation_rows() -> None:
    """A-5, B-07, R5, T1: what creates a Run, an Attempt and a lease, and in which status."""
    created = {
        table.name: {(edge.trigger, edge.target) for edge in table.edges() if edge.source is None}
        for table in (RUN_TABLE, ATTEMPT_TABLE, LEASE_TABLE)
    }
    assert created == {
        "Run": {
            (CommandName.ADMIT_RUN, RunStatus.QUEUED),
            (CommandName.CREATE_RUN, RunStatus.CREATED),
        },
        "Attempt": {
            (CommandName.ADMIT_RUN, AttemptStatus.CLAIMED),
            (CommandName.LOST_RETRY_STEP, AttemptStatus.CLAIMED),
        },
        "Run dispatch lease": {(CommandName.GRANT_LEASE, LeaseStatus.LEASED)},
    }
    assert not [
        edge
        for table in (RUN_TABLE, ATTEMPT_TABLE, LEASE_TABLE)
        for edge in table.edges()
        if edge.target is None
    ]
