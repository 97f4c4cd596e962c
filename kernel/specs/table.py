"""One shape for the legality table of every state machine (ARCHITECTURE rule 2).

A `Table[StateT, TriggerT]` is the whole legal surface of one machine (Run, Attempt, Run dispatch
lease, journal record, journal ownership, inbox lifecycle): for each row `(source, trigger)`, the
states the machine may hold afterwards. Several targets mean the code picks one by data (e.g. T6
lands on the reported outcome); a self-loop is a legal step that keeps the state.

- `None` as a source is "no entity yet": a creation row (admission, a retry Attempt, a lease grant,
  the journal's first publish). A table has the `None` source iff it has a creation row.
- `None` as a target is "no entity afterwards": a deletion row (journal retention, §3.14).
- A missing pair is every `(source, trigger)` of the declared sources and trigger enum that is not
  a row. The code that obeys the table refuses it and changes nothing (RUN-05, INBOX-01,
  INBOX-22, INBOX-28); `tests/test_state_tables.py` walks every edge and every missing pair
  against that code.

Tables are written as literals grouped by source, like h11's `_state.py`
(`{source: {trigger: target(s)}}`, aligned rows, a terminal state as `{}`), and checked once when
built: every source, trigger and target belongs to the declared enums. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Generic, TypeAlias, TypeVar

__all__ = ["NONE_LABEL", "Edge", "Table", "Targets"]

StateT = TypeVar("StateT", bound=StrEnum)
TriggerT = TypeVar("TriggerT", bound=StrEnum)

#: What one row of a literal table says: one state, a set of states (the code picks by data), or
#: `None` (the entity is deleted).
Targets: TypeAlias = StateT | AbstractSet[StateT] | None

#: How "no entity" (a creation source or a deletion target) is drawn in a Mermaid diagram.
NONE_LABEL = "[*]"


@dataclass(frozen=True, slots=True)
class Edge(Generic[StateT, TriggerT]):
    """One edge of a table: `source` (None: created) -`trigger`-> `target` (None: deleted)."""

    source: StateT | None
    trigger: TriggerT
    target: StateT | None


@dataclass(frozen=True, slots=True)
class Table(Generic[StateT, TriggerT]):
    """A machine's legal transitions; build it with `Table.of` from a literal."""

    name: str
    states: tuple[StateT, ...]
    triggers: tuple[TriggerT, ...]
    rows: Mapping[tuple[StateT | None, TriggerT], frozenset[StateT | None]]

    @classmethod
    def of(
        cls,
        name: str,
        states: type[StateT],
        triggers: type[TriggerT],
        literal: Mapping[StateT | None, Mapping[TriggerT, Targets[StateT]]],
    ) -> Table[StateT, TriggerT]:
        """Flatten `{source: {trigger: target(s)}}` into rows; reject anything outside the
        declared enums or a row with no target (a mistake in a literal fails at import)."""
        declared_states: tuple[StateT, ...] = tuple(states)
        declared_triggers: tuple[TriggerT, ...] = tuple(triggers)
        rows: dict[tuple[StateT | None, TriggerT], frozenset[StateT | None]] = {}
        for source, by_trigger in literal.items():
            # `isinstance`, not `in`: members of two StrEnums with one value compare equal.
            if source is not None and not isinstance(source, states):
                raise ValueError(f"{name}: source {source!r} is not a {states.__name__}")
            for trigger, targets in by_trigger.items():
                if not isinstance(trigger, triggers):
                    raise ValueError(f"{name}: trigger {trigger!r} is not a {triggers.__name__}")
                normalized = _normalize(targets)
                if not normalized:
                    raise ValueError(f"{name}: ({source}, {trigger}) has no target")
                if not all(target is None or isinstance(target, states) for target in normalized):
                    raise ValueError(f"{name}: ({source}, {trigger}) targets an unknown state")
                rows[(source, trigger)] = normalized
        return cls(name, declared_states, declared_triggers, MappingProxyType(rows))

    # -- lookup --------------------------------------------------------------------------------
    def lookup(self, source: StateT | None, trigger: TriggerT) -> frozenset[StateT | None] | None:
        """The targets of the row `(source, trigger)`, or None when the pair is missing."""
        return self.rows.get((source, trigger))

    def allows(self, source: StateT | None, trigger: TriggerT, target: StateT | None) -> bool:
        """`source -trigger-> target` is an edge."""
        targets = self.rows.get((source, trigger))
        return targets is not None and target in targets

    def successor(self, source: StateT | None, trigger: TriggerT) -> StateT | None:
        """The one state after `trigger` in `source`, or None when the pair is missing. Only for
        rows with exactly one target state (ownership, inbox lifecycle): anything else is a
        caller's mistake and raises `ValueError`."""
        targets = self.rows.get((source, trigger))
        if targets is None:
            return None
        if len(targets) != 1:
            raise ValueError(f"{self.name}: ({source}, {trigger}) has {len(targets)} targets")
        (target,) = targets
        if target is None:
            raise ValueError(f"{self.name}: ({source}, {trigger}) deletes, it has no successor")
        return target

    # -- the whole surface ---------------------------------------------------------------------
    @property
    def sources(self) -> tuple[StateT | None, ...]:
        """The declared sources: every state, and `None` first when the table creates."""
        creates = any(source is None for source, _trigger in self.rows)
        return (None, *self.states) if creates else self.states

    def edges(self) -> tuple[Edge[StateT, TriggerT], ...]:
        """Every edge, one per (row, target): rows in literal order, targets in enum order
        (deletion last), so the order never depends on hashing."""
        out: list[Edge[StateT, TriggerT]] = []
        for (source, trigger), targets in self.rows.items():
            for target in sorted(targets, key=self._position):
                out.append(Edge(source, trigger, target))
        return tuple(out)

    def missing(self) -> tuple[tuple[StateT | None, TriggerT], ...]:
        """Every declared (source, trigger) pair that is not a row, sources then triggers in
        declaration order: what the code must refuse, changing nothing."""
        return tuple(
            (source, trigger)
            for source in self.sources
            for trigger in self.triggers
            if (source, trigger) not in self.rows
        )

    def mermaid(self) -> str:
        """A Mermaid `stateDiagram-v2`: one arrow per (source, target) listing every trigger
        that takes it, sorted by name; `[*]` is "no entity" (creation or deletion)."""
        arrows: dict[tuple[str, str], set[str]] = defaultdict(set)
        for edge in self.edges():
            arrows[(_label(edge.source), _label(edge.target))].add(edge.trigger.value)
        lines = ["stateDiagram-v2"]
        for (source, target), triggers in sorted(arrows.items()):
            lines.append(f"    {source} --> {target}: {', '.join(sorted(triggers))}")
        return "\n".join(lines)

    def _position(self, state: StateT | None) -> int:
        return len(self.states) if state is None else self.states.index(state)


def _normalize(targets: Targets[StateT]) -> frozenset[StateT | None]:
    if targets is None:
        return frozenset({None})
    if isinstance(targets, AbstractSet):
        return frozenset(targets)
    return frozenset({targets})


def _label(state: StrEnum | None) -> str:
    return NONE_LABEL if state is None else state.value
