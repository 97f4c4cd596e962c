"""The closed `Outcome` union of every transition (SPEC §0.3).

`Applied(aggregate, effects, code)`: the new aggregate and the effects that persist it.
`Replayed(code)`: an exact replay was recognised; nothing to write.
`Rejected(code)`: a domain refusal; nothing to write (fail closed).
`Raced(code)`: the input no longer matches the candidate that was selected; nothing to write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kernel.effects import AppendEvent, Effect
from kernel.entities import Event, RunAggregate
from kernel.specs.codes import Code
from kernel.specs.states import OutcomeKind


@dataclass(frozen=True, slots=True)
class Applied:
    kind: ClassVar[OutcomeKind] = OutcomeKind.APPLIED
    aggregate: RunAggregate
    effects: tuple[Effect, ...]
    code: Code = Code.APPLIED

    @property
    def events(self) -> tuple[Event, ...]:
        return tuple(e.event for e in self.effects if isinstance(e, AppendEvent))


@dataclass(frozen=True, slots=True)
class Replayed:
    kind: ClassVar[OutcomeKind] = OutcomeKind.REPLAYED
    code: Code


@dataclass(frozen=True, slots=True)
class Rejected:
    kind: ClassVar[OutcomeKind] = OutcomeKind.REJECTED
    code: Code


@dataclass(frozen=True, slots=True)
class Raced:
    kind: ClassVar[OutcomeKind] = OutcomeKind.RACED
    code: Code


Outcome = Applied | Replayed | Rejected | Raced
