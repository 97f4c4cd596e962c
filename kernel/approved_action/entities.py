"""The approval domain's rows (issue 19, decision AA-D1; SPEC §5.1's ports page over them).

`ApprovedAction` is one approval request: the exact Run admission it will make (`admission`, an
`AdmitRun` whose ids are the Run's, pinned when the request is made), who asked and when, who
decided and when, when the dispatcher passed the start barrier, and how it ended. Each change
appends one `ActionEvent` (who, when, what), so `version == event_seq` always.

`ActionAggregate` is what one transaction loads: the action and the Run admitted under its
Run id, if any. That Run is the only evidence the reconciler reads (ADR-0036 §1: evidence only).
"""

from __future__ import annotations

from dataclasses import dataclass

from kernel.commands import AdmitRun
from kernel.entities import RunAggregate
from kernel.specs.approved_action import ActionEventType, ActionStatus
from kernel.specs.states import Actor

__all__ = ["ActionAggregate", "ActionEvent", "ApprovedAction"]


@dataclass(frozen=True, slots=True)
class ApprovedAction:
    """One approval request and its lifecycle (`kernel.specs.approved_action.ACTION_TABLE`)."""

    action_id: str
    admission: AdmitRun
    status: ActionStatus
    version: int
    event_seq: int
    requested_by: str
    requested_at_ms: int
    updated_at_ms: int
    decided_by: str | None = None
    decided_at_ms: int | None = None
    claimed_at_ms: int | None = None
    finished_at_ms: int | None = None
    code: str | None = None

    @property
    def run_id(self) -> str:
        return self.admission.run_id


@dataclass(frozen=True, slots=True)
class ActionEvent:
    """An append-only Event of one action: `actor` is the kind of author (a person is
    `user`, named by `by`; the dispatcher is `scheduler`, the reconciler `reconciler`)."""

    action_id: str
    seq: int
    type: ActionEventType
    actor: Actor
    at_ms: int
    by: str | None = None
    code: str | None = None


@dataclass(frozen=True, slots=True)
class ActionAggregate:
    """An action as loaded in one transaction, with the Run under its Run id (None: no Run)."""

    action: ApprovedAction
    run: RunAggregate | None
