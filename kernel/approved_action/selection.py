"""The two due indexes the Approved Action ports page over, as a pure oracle (SPEC §5.1, §5.3;
P-1..P-6; decision AA-D1). Every store answers the same query; the reference store answers it
with this function, the edge store with one bounded index query (`runners/edge/sql/
approved_action.sql`), and conformance compares them.

- `approval_dispatch`: actions `approved`, in keyset order `(decided_at_ms, action_id)`;
- `approval_recovery`: actions `starting` (behind the start barrier), in `(claimed_at_ms,
  action_id)`.

A page is the keys of at most `limit` items strictly after `after` (P-3) and whether more exist
(`truncated`); its last key is the next cursor.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from kernel.approved_action.entities import ApprovedAction
from kernel.approved_action.pages import ActionCursor
from kernel.specs.approved_action import ActionStatus

__all__ = ["ActionSource", "DuePage", "action_key", "due_page"]

#: The hard cap of a due page (SPEC §5.1: the domain's page size cap).
DUE_PAGE_HARD_CAP = 64


class ActionSource(enum.StrEnum):
    DISPATCH = "approval_dispatch"
    RECOVERY = "approval_recovery"


@dataclass(frozen=True, slots=True)
class DuePage:
    """One page of a due index: the items' keys in order and whether more are due."""

    keys: tuple[ActionCursor, ...]
    truncated: bool

    @property
    def next_cursor(self) -> ActionCursor | None:
        return self.keys[-1] if self.keys else None


def action_key(action: ApprovedAction, source: ActionSource) -> ActionCursor | None:
    """The action's key in `source`'s index, or None when it is not due there."""
    if source is ActionSource.DISPATCH:
        if action.status is ActionStatus.APPROVED and action.decided_at_ms is not None:
            return ActionCursor(action.decided_at_ms, action.action_id)
        return None
    if action.status is ActionStatus.STARTING and action.claimed_at_ms is not None:
        return ActionCursor(action.claimed_at_ms, action.action_id)
    return None


def due_page(
    actions: Iterable[ApprovedAction],
    source: ActionSource,
    after: ActionCursor | None,
    limit: int,
) -> DuePage:
    """The oracle of both due indexes (see the module docstring)."""
    if type(limit) is not int or not 1 <= limit <= DUE_PAGE_HARD_CAP:
        raise ValueError(f"limit must be 1..{DUE_PAGE_HARD_CAP}")
    keys = sorted(
        key
        for key in (action_key(a, source) for a in actions)
        if key is not None and (after is None or key > after)
    )
    return DuePage(tuple(keys[:limit]), len(keys) > limit)
