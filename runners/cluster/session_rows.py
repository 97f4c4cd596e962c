"""`worker_sessions` rows <-> `kernel.SessionRecord` (the registry's one mapping, shared by the
registry, the dispatcher and `ClusterTransaction.worker_session`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kernel import SessionRecord, WorkerSession
from kernel.specs import WorkerSessionStatus

__all__ = ["SESSION_COLUMNS", "record_params", "session_record", "stored_view"]

#: The column order of every `SELECT` of a session row in registry.sql and dispatch.sql.
SESSION_COLUMNS = (
    "worker_id",
    "session_id",
    "generation",
    "status",
    "executor_types",
    "capacity",
    "public_key",
    "session_expires_at_ms",
    "registered_at_ms",
    "updated_at_ms",
    "version",
)


def session_record(row: Sequence[Any]) -> SessionRecord:
    values = dict(zip(SESSION_COLUMNS, row[: len(SESSION_COLUMNS)], strict=True))
    return SessionRecord(
        worker_id=str(values["worker_id"]),
        session_id=str(values["session_id"]),
        generation=int(values["generation"]),
        status=WorkerSessionStatus(values["status"]),
        executor_types=tuple(str(t) for t in values["executor_types"]),
        capacity=int(values["capacity"]),
        public_key=bytes(values["public_key"]),
        session_expires_at_ms=int(values["session_expires_at_ms"]),
        registered_at_ms=int(values["registered_at_ms"]),
        updated_at_ms=int(values["updated_at_ms"]),
        version=int(values["version"]),
    )


def record_params(record: SessionRecord) -> dict[str, Any]:
    return {
        "worker_id": record.worker_id,
        "session_id": record.session_id,
        "generation": record.generation,
        "status": record.status.value,
        "executor_types": list(record.executor_types),
        "capacity": record.capacity,
        "public_key": record.public_key,
        "session_expires_at_ms": record.session_expires_at_ms,
        "registered_at_ms": record.registered_at_ms,
        "updated_at_ms": record.updated_at_ms,
        "version": record.version,
    }


def stored_view(record: SessionRecord) -> WorkerSession:
    """The row as a `WorkerSession`, its status as stored: a command's own guard compares
    `session_expires_at_ms` with the command's observation time (§1.7 fence, T1)."""
    return WorkerSession(
        worker_id=record.worker_id,
        session_id=record.session_id,
        generation=record.generation,
        status=record.status,
        session_expires_at_ms=record.session_expires_at_ms,
        executor_types=record.executor_types,
    )
