"""Rows <-> kernel entities, shared by the runners: the tables' columns are the entity field names
(SPEC §1.1, both migrations), so the named parameters of a row and the converters back from
column values are the same for SQLite and PostgreSQL. Pure mapping: no SQL, no connection.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from kernel import (
    AppendEvent,
    Attempt,
    Effect,
    Event,
    InsertAttempt,
    InsertLease,
    InsertPolicy,
    InsertRun,
    Lease,
    Run,
    RunRetryPolicy,
    UpdateAttempt,
    UpdateLease,
    UpdatePolicy,
    UpdateRun,
)
from kernel.specs import (
    AttemptStatus,
    CancelReason,
    LeaseStatus,
    ReleaseReason,
    RunKind,
    RunOwner,
    RunStatus,
    Safety,
)

__all__ = [
    "ATTEMPT_TYPES",
    "LEASE_TYPES",
    "POLICY_TYPES",
    "RUN_TYPES",
    "canonical_payload",
    "effect_statement",
    "event_params",
    "row_params",
]

RUN_TYPES: Final[Mapping[str, Callable[[Any], Any]]] = {
    "kind": RunKind,
    "owner": RunOwner,
    "status": RunStatus,
    "cancel_reason": CancelReason,
}
ATTEMPT_TYPES: Final[Mapping[str, Callable[[Any], Any]]] = {"status": AttemptStatus}
POLICY_TYPES: Final[Mapping[str, Callable[[Any], Any]]] = {"safety": Safety, "retry_on_lost": bool}
LEASE_TYPES: Final[Mapping[str, Callable[[Any], Any]]] = {
    "status": LeaseStatus,
    "release_reason": ReleaseReason,
}


_FIELD_NAMES: Mapping[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls))
    for cls in (Run, Attempt, RunRetryPolicy, Lease)
}


def row_params(row: Run | Attempt | RunRetryPolicy | Lease) -> dict[str, Any]:
    """Named parameters of a row: enums as their values, booleans as 0/1."""
    out: dict[str, Any] = {}
    for name in _FIELD_NAMES[type(row)]:
        value = getattr(row, name)
        if isinstance(value, enum.Enum):
            value = value.value
        elif isinstance(value, bool):
            value = int(value)
        out[name] = value
    return out


def event_params(event: Event) -> dict[str, Any]:
    payload = {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in event.payload}
    return {
        "event_id": event.event_id,
        "run_id": event.run_id,
        "seq": event.seq,
        "type": event.type,
        "actor": event.actor.value,
        "dedupe_key": event.dedupe_key,
        "at_ms": event.at_ms,
        "attempt_id": event.attempt_id,
        "step_run_id": event.step_run_id,
        "code": event.code,
        "payload": canonical_payload(payload),
    }


def canonical_payload(payload: Mapping[str, Any]) -> str:
    """Event payloads are stored as canonical JSON text (sorted keys, no whitespace)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def effect_statement(effect: Effect) -> tuple[str, dict[str, Any]]:
    """The named statement that persists `effect` and its parameters, guard included (the same
    section names in `runners/edge/sql/statements.sql` and `runners/cluster/sql/statements.sql`).
    Booleans are 0/1 here; a store with a real BOOLEAN converts them."""
    if isinstance(effect, InsertRun):
        return "insert_run", row_params(effect.row)
    if isinstance(effect, UpdateRun):
        return "update_run", row_params(effect.row) | {"expected_version": effect.expected_version}
    if isinstance(effect, InsertAttempt):
        return "insert_attempt", row_params(effect.row)
    if isinstance(effect, UpdateAttempt):
        return "update_attempt", row_params(effect.row) | {
            "expected_status": effect.expected_status.value,
            "expected_lease_version": effect.expected_lease_version,
        }
    if isinstance(effect, InsertPolicy):
        return "insert_policy", row_params(effect.row)
    if isinstance(effect, UpdatePolicy):
        params = row_params(effect.row) | {"expected_version": effect.expected_version}
        return "update_policy", params
    if isinstance(effect, InsertLease):
        return "insert_lease", row_params(effect.row)
    if isinstance(effect, UpdateLease):
        return "update_lease", row_params(effect.row) | {
            "expected_version": effect.expected_version,
            "expected_status": effect.expected_status.value,
        }
    if isinstance(effect, AppendEvent):
        return "insert_event", event_params(effect.event)
    raise TypeError(f"unknown effect {type(effect).__name__}")  # pragma: no cover - closed union
