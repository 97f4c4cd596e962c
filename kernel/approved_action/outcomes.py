"""The closed outcome union of every approval-domain transition (SPEC §0.3 as for Runs).

`ActionApplied` carries the new action, the Run aggregate after the transaction (a start's
admission, or the Run as read) and the effects; the other kinds are the Run domain's values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, TypeAlias

from kernel.approved_action.effects import AnyActionEffect, AppendActionEvent
from kernel.approved_action.entities import ActionEvent, ApprovedAction
from kernel.entities import RunAggregate
from kernel.outcomes import Raced, Rejected, Replayed
from kernel.specs.codes import Code
from kernel.specs.states import OutcomeKind

__all__ = ["ActionApplied", "ActionOutcome"]


@dataclass(frozen=True, slots=True)
class ActionApplied:
    kind: ClassVar[OutcomeKind] = OutcomeKind.APPLIED
    action: ApprovedAction
    run: RunAggregate | None
    effects: tuple[AnyActionEffect, ...]
    code: Code = Code.APPLIED

    @property
    def events(self) -> tuple[ActionEvent, ...]:
        return tuple(e.event for e in self.effects if isinstance(e, AppendActionEvent))


ActionOutcome: TypeAlias = ActionApplied | Replayed | Rejected | Raced
