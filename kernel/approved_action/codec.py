"""An approved action and its Events as flat rows (decision AA-D1): the columns of the edge
tables (`runners/edge/migrations/0004_approved_actions.sql`), the canonical projection of
conformance (SPEC §7) and the rows a trace records are this one mapping, so they cannot drift.

The admission the action will make is flattened into `run_id`, `attempt_id`, `project_id`,
`task_id`, `task_revision`, `executor_type`, `run_kind`, `run_owner`, `run_actor` and the five
`policy_*` columns (all NULL without a policy). Values are JSON scalars; enums are their values;
booleans are booleans (a store converts its integers back with `action_from_row`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kernel.approved_action.entities import ActionEvent, ApprovedAction
from kernel.commands import AdmitRun, PolicyDefinition
from kernel.specs.approved_action import ActionEventType, ActionStatus
from kernel.specs.states import Actor, RunKind, RunOwner, Safety

__all__ = [
    "ACTION_COLUMNS",
    "ACTION_EVENT_COLUMNS",
    "action_event_from_row",
    "action_event_row",
    "action_from_row",
    "action_row",
]

ACTION_COLUMNS: Final = (
    "action_id",
    "status",
    "version",
    "event_seq",
    "requested_by",
    "requested_at_ms",
    "updated_at_ms",
    "decided_by",
    "decided_at_ms",
    "claimed_at_ms",
    "finished_at_ms",
    "code",
    "run_id",
    "attempt_id",
    "project_id",
    "task_id",
    "task_revision",
    "executor_type",
    "run_kind",
    "run_owner",
    "run_actor",
    "policy_max_attempts",
    "policy_retry_on_lost",
    "policy_safety",
    "policy_backoff_base_ms",
    "policy_backoff_max_ms",
)
ACTION_EVENT_COLUMNS: Final = ("action_id", "seq", "type", "actor", "at_ms", "by", "code")


def action_row(action: ApprovedAction) -> dict[str, Any]:
    """The action as one flat row, keyed by `ACTION_COLUMNS`."""
    a = action.admission
    p = a.provider_policy
    return {
        "action_id": action.action_id,
        "status": action.status.value,
        "version": action.version,
        "event_seq": action.event_seq,
        "requested_by": action.requested_by,
        "requested_at_ms": action.requested_at_ms,
        "updated_at_ms": action.updated_at_ms,
        "decided_by": action.decided_by,
        "decided_at_ms": action.decided_at_ms,
        "claimed_at_ms": action.claimed_at_ms,
        "finished_at_ms": action.finished_at_ms,
        "code": action.code,
        "run_id": a.run_id,
        "attempt_id": a.attempt_id,
        "project_id": a.project_id,
        "task_id": a.task_id,
        "task_revision": a.task_revision,
        "executor_type": a.executor_type,
        "run_kind": a.kind.value,
        "run_owner": a.owner.value,
        "run_actor": a.actor.value,
        "policy_max_attempts": None if p is None else p.max_attempts,
        "policy_retry_on_lost": None if p is None else p.retry_on_lost,
        "policy_safety": None if p is None else p.safety.value,
        "policy_backoff_base_ms": None if p is None else p.backoff_base_ms,
        "policy_backoff_max_ms": None if p is None else p.backoff_max_ms,
    }


def action_from_row(row: Mapping[str, Any]) -> ApprovedAction:
    """The inverse of `action_row` (integers 0/1 read as booleans)."""
    policy = None
    if row["policy_max_attempts"] is not None:
        policy = PolicyDefinition(
            max_attempts=int(row["policy_max_attempts"]),
            retry_on_lost=bool(row["policy_retry_on_lost"]),
            safety=Safety(row["policy_safety"]),
            backoff_base_ms=int(row["policy_backoff_base_ms"]),
            backoff_max_ms=int(row["policy_backoff_max_ms"]),
        )
    admission = AdmitRun(
        run_id=row["run_id"],
        attempt_id=row["attempt_id"],
        project_id=row["project_id"],
        task_id=row["task_id"],
        task_revision=int(row["task_revision"]),
        executor_type=row["executor_type"],
        provider_policy=policy,
        kind=RunKind(row["run_kind"]),
        owner=RunOwner(row["run_owner"]),
        actor=Actor(row["run_actor"]),
    )
    return ApprovedAction(
        action_id=row["action_id"],
        admission=admission,
        status=ActionStatus(row["status"]),
        version=int(row["version"]),
        event_seq=int(row["event_seq"]),
        requested_by=row["requested_by"],
        requested_at_ms=int(row["requested_at_ms"]),
        updated_at_ms=int(row["updated_at_ms"]),
        decided_by=row["decided_by"],
        decided_at_ms=_int(row["decided_at_ms"]),
        claimed_at_ms=_int(row["claimed_at_ms"]),
        finished_at_ms=_int(row["finished_at_ms"]),
        code=row["code"],
    )


def action_event_row(event: ActionEvent) -> dict[str, Any]:
    return {
        "action_id": event.action_id,
        "seq": event.seq,
        "type": event.type.value,
        "actor": event.actor.value,
        "at_ms": event.at_ms,
        "by": event.by,
        "code": event.code,
    }


def action_event_from_row(row: Mapping[str, Any]) -> ActionEvent:
    return ActionEvent(
        action_id=row["action_id"],
        seq=int(row["seq"]),
        type=ActionEventType(row["type"]),
        actor=Actor(row["actor"]),
        at_ms=int(row["at_ms"]),
        by=row["by"],
        code=row["code"],
    )


def _int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]
