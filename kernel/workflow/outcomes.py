"""The closed outcome union of every Workflow transition (SPEC §0.3 as for Runs).

`WorkflowApplied` carries the new `WorkflowAggregate` and the effects that persist it; the
other three kinds are the Run domain's own values (`Replayed`, `Rejected`, `Raced`): nothing to
write. A Task admission replay is `Replayed(EXISTING)`: the ledger entry already there is the
answer (§4.3), read from the aggregate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from kernel.effects import AppendEvent
from kernel.entities import Event
from kernel.outcomes import Raced, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.states import OutcomeKind
from kernel.workflow.effects import WorkflowEffect
from kernel.workflow.entities import WorkflowAggregate

__all__ = ["WorkflowApplied", "WorkflowOutcome"]


@dataclass(frozen=True, slots=True)
class WorkflowApplied:
    kind: ClassVar[OutcomeKind] = OutcomeKind.APPLIED
    aggregate: WorkflowAggregate
    effects: tuple[WorkflowEffect, ...]
    code: Code = Code.APPLIED

    @property
    def events(self) -> tuple[Event, ...]:
        return tuple(e.event for e in self.effects if isinstance(e, AppendEvent))


WorkflowOutcome = WorkflowApplied | Replayed | Rejected | Raced
