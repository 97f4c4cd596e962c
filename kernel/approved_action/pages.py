"""The values the Approved Action supervisor's two ports return (SPEC §5.1, ADR-0036 §1-§2).

- `ActionCursor`: the keyset cursor of both due indexes, `(at_ms, action_id)`, ordered
  lexicographically (P-3: the key ends with a unique id, so the order is total). A cursor is the
  key of the last item a page returned; the next page holds only items strictly after it
  (`strictly_after`).
- `RecoveryCounters` / `DispatchCounters`: the fixed numeric counters of one page [decision §5.1].
  They add (`plus`, `+`) and have a zero (`zero()`), so a phase summary is their sum (§5.3 step 1).
  Every field is a non-negative `int` (never a `bool`): anything else raises `ValueError` at
  construction, so a port cannot smuggle text, lists or evidence into a summary (AA-07).
- `RecoveryPage` / `DispatchPage`: one port answer: counters, `truncated` (more due items exist)
  and `next_cursor?`.

Pure values: no I/O, no clock (ARCHITECTURE rule 3).
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import Protocol, Self, TypeVar

__all__ = [
    "ActionCursor",
    "DispatchCounters",
    "DispatchPage",
    "Phase",
    "PhasePage",
    "RecoveryCounters",
    "RecoveryPage",
    "strictly_after",
]


class Phase(enum.StrEnum):
    """The two phases of one supervisor cycle, in their fixed order (§5.2, AA-01)."""

    RECOVERY = "recovery"
    DISPATCH = "dispatch"


@dataclass(frozen=True, slots=True, order=True)
class ActionCursor:
    """The keyset cursor of a due index: `(at_ms, action_id)`, compared lexicographically (P-3).

    `order=True` compares the fields in declaration order, which is exactly the keyset order.
    """

    at_ms: int
    action_id: str

    def __post_init__(self) -> None:
        if type(self.at_ms) is not int or self.at_ms < 0:
            raise ValueError("ActionCursor.at_ms must be an int >= 0")
        if type(self.action_id) is not str or not self.action_id:
            raise ValueError("ActionCursor.action_id must be a non-empty str")


def strictly_after(candidate: ActionCursor | None, current: ActionCursor | None) -> bool:
    """P-3 / §5.3 step 3: does `candidate` strictly advance past `current`?

    A missing candidate never advances; any candidate advances past "no cursor yet" (the due
    index start).
    """
    if candidate is None:
        return False
    return current is None or candidate > current


def _check_counter(owner: str, name: str, value: object) -> None:
    # bool is an int subclass: refuse it, as floats, NaN and text (AA-07: numbers only).
    if type(value) is not int or value < 0:
        raise ValueError(f"{owner}.{name} must be an int >= 0")


class _CounterSum:
    """Shared behaviour of the two counter sets: validation, zero and addition (§5.3 step 1)."""

    __slots__ = ()

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            _check_counter(type(self).__name__, f.name, getattr(self, f.name))

    @classmethod
    def zero(cls) -> Self:
        """Every counter 0: the summary of a phase before its first page."""
        return cls(**{f.name: 0 for f in dataclasses.fields(cls)})  # type: ignore[arg-type]

    def plus(self, other: Self) -> Self:
        """Field-wise sum with another counter set of the same kind."""
        if type(other) is not type(self):
            raise TypeError(f"cannot add {type(other).__name__} to {type(self).__name__}")
        return type(self)(
            **{
                f.name: getattr(self, f.name) + getattr(other, f.name)
                for f in dataclasses.fields(self)  # type: ignore[arg-type]
            }
        )

    def __add__(self, other: Self) -> Self:
        return self.plus(other)

    def as_dict(self) -> dict[str, int]:
        """The counters by name (reports and metrics read them; numbers only)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class RecoveryCounters(_CounterSum):
    """The recovery reconciler's page counters [decision §5.1]."""

    scanned: int
    claimed: int
    verified_succeeded: int
    verified_failed: int
    deferred: int
    manual_required: int
    execution_active: int
    already_resolved: int
    unavailable: int


@dataclass(frozen=True, slots=True)
class DispatchCounters(_CounterSum):
    """The dispatcher's page counters [decision §5.1]."""

    scanned: int
    claimed: int
    started: int
    succeeded: int
    failed: int
    blocked: int
    retrying: int
    deferred: int
    recovery_required: int
    already_terminal: int
    unavailable: int


#: Either counter set (the paging algorithm is the same for both phases).
C = TypeVar("C", RecoveryCounters, DispatchCounters)
C_co = TypeVar("C_co", covariant=True)


class PhasePage(Protocol[C_co]):
    """One page of either port, as the paging algorithm reads it (§5.1)."""

    @property
    def counters(self) -> C_co: ...

    @property
    def truncated(self) -> bool: ...

    @property
    def next_cursor(self) -> ActionCursor | None: ...


def _check_page(
    owner: str, counters: object, kind: type, truncated: object, cursor: object
) -> None:
    if type(counters) is not kind:
        raise ValueError(f"{owner}.counters must be {kind.__name__}")
    if type(truncated) is not bool:
        raise ValueError(f"{owner}.truncated must be a bool")
    if cursor is not None and type(cursor) is not ActionCursor:
        raise ValueError(f"{owner}.next_cursor must be an ActionCursor or None")


@dataclass(frozen=True, slots=True)
class RecoveryPage:
    """`reconcile_batch(cursor?, page_size)`'s answer (§5.1)."""

    counters: RecoveryCounters
    truncated: bool
    next_cursor: ActionCursor | None = None

    def __post_init__(self) -> None:
        _check_page(
            "RecoveryPage", self.counters, RecoveryCounters, self.truncated, self.next_cursor
        )


@dataclass(frozen=True, slots=True)
class DispatchPage:
    """`dispatch_batch(cursor?, page_size)`'s answer (§5.1)."""

    counters: DispatchCounters
    truncated: bool
    next_cursor: ActionCursor | None = None

    def __post_init__(self) -> None:
        _check_page(
            "DispatchPage", self.counters, DispatchCounters, self.truncated, self.next_cursor
        )
