"""The journal record's bytes (SPEC §3.3, §3.9 F-2, F-9): one strict codec for every adapter.

`encode_record` gives the canonical JSON of a revision (sorted keys, compact, UTF-8): what the
file adapter writes to `<offer_id>.json` and the SQLite adapter stores in its row, so both
adapters hold byte-identical records. The offer's lease token is in it (the Worker must
present it, ADR-0021 §3): the bytes are a capability, which is why files are `0600` in a
`0700` root and why neither the bytes nor a decoded field ever reach a log (S-1).

`decode_record` is strict: a member missing or unknown, a wrong type, a bad enum value, a
record that breaks a §3.3 rule, or one filed under another offer id raises `JournalCorrupt`
(`JOURNAL_CORRUPT`) with the field's name only, never a value. Corruption is reported, never
accepted, skipped or repaired (F-9).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kernel.identity import IdentityError, Secret
from kernel.specs.codes import Code
from kernel.specs.journal import DeliveryKind, JournalState, RecoveryReason
from kernel.specs.states import LeaseStatus
from kernel.worker.record import (
    JournalRecord,
    Offer,
    OfferCandidate,
    OfferLease,
    OfferWorker,
    record_violations,
)


class JournalCorrupt(ValueError):
    """A stored record that is not a valid revision (F-9). `field` names where; no value."""

    code = Code.JOURNAL_CORRUPT

    def __init__(self, field: str) -> None:
        super().__init__(f"{Code.JOURNAL_CORRUPT}: {field}")
        self.field = field


# -- encode ----------------------------------------------------------------------------------
def record_document(record: JournalRecord) -> dict[str, object]:
    """The record as a JSON object (the lease token in the clear: see the module docstring)."""
    o = record.offer
    c, w, lease = o.candidate, o.worker, o.lease
    return {
        "schema_version": record.schema_version,
        "revision": record.revision,
        "state": record.state.value,
        "accepted_at_ms": record.accepted_at_ms,
        "updated_at_ms": record.updated_at_ms,
        "executor_started_at_ms": record.executor_started_at_ms,
        "log_artifact_id": record.log_artifact_id,
        "executor_handle": record.executor_handle,
        "callback_sequence": record.callback_sequence,
        "callback_token_sha256": record.callback_token_sha256,
        "completion_acknowledged_at_ms": record.completion_acknowledged_at_ms,
        "recovery_reason": None if record.recovery_reason is None else record.recovery_reason.value,
        "start_failure_code": record.start_failure_code,
        "offer": {
            "offer_id": o.offer_id,
            "execution_spec_digest": o.execution_spec_digest,
            "delivery_kind": o.delivery_kind.value,
            "candidate": {
                "run_id": c.run_id,
                "attempt_id": c.attempt_id,
                "project_id": c.project_id,
                "task_id": c.task_id,
                "task_revision": c.task_revision,
                "executor_type": c.executor_type,
            },
            "worker": {"id": w.worker_id, "session_id": w.session_id, "generation": w.generation},
            "lease": {
                "run_id": lease.run_id,
                "attempt_id": lease.attempt_id,
                "lease_generation": lease.lease_generation,
                "version": lease.version,
                "status": lease.status.value,
                "worker_id": lease.worker_id,
                "worker_session_id": lease.worker_session_id,
                "worker_generation": lease.worker_generation,
                "lease_token": lease.lease_token.reveal(),
                "expires_at_ms": lease.expires_at_ms,
            },
            "execution_spec": dict(o.execution_spec),
        },
    }


def encode_record(record: JournalRecord) -> bytes:
    """Canonical JSON bytes of one revision."""
    return json.dumps(
        record_document(record), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")


# -- decode ----------------------------------------------------------------------------------
class _Reader:
    def __init__(self, data: Mapping[str, Any], path: str) -> None:
        self.data = data
        self.path = path
        self.seen: set[str] = set()

    def _get(self, key: str) -> Any:
        if key not in self.data:
            raise JournalCorrupt(f"{self.path}{key}:missing")
        self.seen.add(key)
        return self.data[key]

    def integer(self, key: str, *, optional: bool = False) -> Any:
        value = self._get(key)
        if value is None and optional:
            return None
        if type(value) is not int:
            raise JournalCorrupt(f"{self.path}{key}:not_an_integer")
        return value

    def text(self, key: str, *, optional: bool = False) -> Any:
        value = self._get(key)
        if value is None and optional:
            return None
        if not isinstance(value, str):
            raise JournalCorrupt(f"{self.path}{key}:not_a_string")
        return value

    def obj(self, key: str) -> _Reader:
        value = self._get(key)
        if not isinstance(value, dict):
            raise JournalCorrupt(f"{self.path}{key}:not_an_object")
        return _Reader(value, f"{self.path}{key}.")

    def raw(self, key: str) -> Any:
        return self._get(key)

    def enum(self, key: str, kind: Any, *, optional: bool = False) -> Any:
        value = self.text(key, optional=optional)
        if value is None:
            return None
        try:
            return kind(value)
        except ValueError:
            raise JournalCorrupt(f"{self.path}{key}:unknown_value") from None

    def done(self) -> None:
        extra = set(self.data) - self.seen
        if extra:
            raise JournalCorrupt(f"{self.path}{sorted(extra)[0]}:unknown_member")


def decode_record(data: bytes, expected_offer_id: str | None = None) -> JournalRecord:
    """Parse and validate one stored revision; `expected_offer_id` is the name it was filed
    under (F-9: a record under the wrong name is corrupt)."""
    try:
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise JournalCorrupt("bytes:not_json") from None
    if not isinstance(document, dict):
        raise JournalCorrupt("record:not_an_object")
    top = _Reader(document, "")
    o = top.obj("offer")
    c, w, lease_r = o.obj("candidate"), o.obj("worker"), o.obj("lease")
    try:
        token = Secret.of(lease_r.text("lease_token"), "lease_token")
    except IdentityError:
        raise JournalCorrupt("offer.lease.lease_token:bad_token") from None
    spec = o.raw("execution_spec")
    if not isinstance(spec, dict):
        raise JournalCorrupt("offer.execution_spec:not_an_object")
    lease = OfferLease(
        run_id=lease_r.text("run_id"),
        attempt_id=lease_r.text("attempt_id"),
        lease_generation=lease_r.integer("lease_generation"),
        version=lease_r.integer("version"),
        status=lease_r.enum("status", LeaseStatus),
        worker_id=lease_r.text("worker_id"),
        worker_session_id=lease_r.text("worker_session_id"),
        worker_generation=lease_r.integer("worker_generation"),
        lease_token=token,
        expires_at_ms=lease_r.integer("expires_at_ms"),
    )
    offer = Offer(
        offer_id=o.text("offer_id"),
        execution_spec_digest=o.text("execution_spec_digest"),
        delivery_kind=o.enum("delivery_kind", DeliveryKind),
        candidate=OfferCandidate(
            run_id=c.text("run_id"),
            attempt_id=c.text("attempt_id"),
            project_id=c.text("project_id"),
            task_id=c.text("task_id"),
            task_revision=c.integer("task_revision"),
            executor_type=c.text("executor_type"),
        ),
        worker=OfferWorker(w.text("id"), w.text("session_id"), w.integer("generation")),
        lease=lease,
        execution_spec=spec,
    )
    record = JournalRecord(
        schema_version=top.integer("schema_version"),
        revision=top.integer("revision"),
        state=top.enum("state", JournalState),
        offer=offer,
        accepted_at_ms=top.integer("accepted_at_ms"),
        updated_at_ms=top.integer("updated_at_ms"),
        executor_started_at_ms=top.integer("executor_started_at_ms", optional=True),
        log_artifact_id=top.text("log_artifact_id", optional=True),
        executor_handle=top.text("executor_handle", optional=True),
        callback_sequence=top.integer("callback_sequence", optional=True),
        callback_token_sha256=top.text("callback_token_sha256", optional=True),
        completion_acknowledged_at_ms=top.integer("completion_acknowledged_at_ms", optional=True),
        recovery_reason=top.enum("recovery_reason", RecoveryReason, optional=True),
        start_failure_code=top.text("start_failure_code", optional=True),
    )
    for reader in (top, o, c, w, lease_r):
        reader.done()
    broken = record_violations(record)
    if broken:
        raise JournalCorrupt(f"rule:{broken[0]}")
    if expected_offer_id is not None and record.offer_id != expected_offer_id:
        raise JournalCorrupt("offer_id:filed_under_another_name")
    return record
