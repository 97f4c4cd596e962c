"""Approval-domain effects -> named statements (issue 19, decision AA-D1), as `runners.rows`
is for the Run domain: the columns are `kernel.approved_action.codec`'s, so the parameters of a
row are the same for every store. A start's Run admission effects go to `runners.rows`. Pure
mapping: no SQL, no connection.
"""

from __future__ import annotations

from typing import Any

from kernel.approved_action import (
    AnyActionEffect,
    AppendActionEvent,
    InsertAction,
    UpdateAction,
    action_event_row,
    action_row,
)
from runners.rows import effect_statement

__all__ = ["action_effect_statement", "action_params"]


def action_params(row: dict[str, Any]) -> dict[str, Any]:
    """A codec row as statement parameters (booleans as integers: SQLite's STRICT tables)."""
    value = row.get("policy_retry_on_lost")
    if isinstance(value, bool):
        row = row | {"policy_retry_on_lost": int(value)}
    return row


def action_effect_statement(effect: AnyActionEffect) -> tuple[str, dict[str, Any]]:
    """The named statement that persists `effect`, and its parameters, guard included."""
    if isinstance(effect, InsertAction):
        return "insert_action", action_params(action_row(effect.row))
    if isinstance(effect, UpdateAction):
        params = action_params(action_row(effect.row))
        return "update_action", params | {"expected_version": effect.expected_version}
    if isinstance(effect, AppendActionEvent):
        return "insert_action_event", action_event_row(effect.event)
    return effect_statement(effect)
