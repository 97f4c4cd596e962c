"""What a store persists for an applied approval-domain command, as data (ARCHITECTURE rule 4).

Each effect maps to one named SQL statement (`runners/edge/sql/approved_action.sql`).
`UpdateAction` carries its guard: `WHERE action_id = ? AND version = :expected_version`; zero
rows is `StaleWrite`, the transaction rolls back and the command is `Raced`. A start's Run
admission effects (`kernel.effects`) come after the action's, in the transition's order.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TypeAlias

from kernel.approved_action.entities import ActionEvent, ApprovedAction
from kernel.effects import Effect

__all__ = [
    "ACTION_EFFECT_TYPES",
    "ActionEffect",
    "AnyActionEffect",
    "AppendActionEvent",
    "InsertAction",
    "UpdateAction",
    "apply_action_effects",
]


@dataclass(frozen=True, slots=True)
class InsertAction:
    row: ApprovedAction


@dataclass(frozen=True, slots=True)
class UpdateAction:
    """CAS on the action's `version`."""

    row: ApprovedAction
    expected_version: int


@dataclass(frozen=True, slots=True)
class AppendActionEvent:
    event: ActionEvent


ActionEffect: TypeAlias = InsertAction | UpdateAction | AppendActionEvent
#: The approval-domain effect types (a store routes them to its approval statements).
ACTION_EFFECT_TYPES = (InsertAction, UpdateAction, AppendActionEvent)
#: Every effect an approval-domain transaction may carry (a start also admits a Run).
AnyActionEffect: TypeAlias = ActionEffect | Effect


class ActionEffectConflict(Exception):
    """The effects do not apply to the state they were computed from."""


def apply_action_effects(
    before: ApprovedAction | None, effects: Iterable[AnyActionEffect]
) -> ApprovedAction | None:
    """The action as a store's SQL would leave it (the contracts' I-4 check)."""
    current = before
    for effect in effects:
        if isinstance(effect, InsertAction):
            if current is not None:
                raise ActionEffectConflict("insert of an existing action")
            current = effect.row
        elif isinstance(effect, UpdateAction):
            if current is None or current.version != effect.expected_version:
                raise ActionEffectConflict("update guard does not hold")
            current = replace(effect.row)
    return current
