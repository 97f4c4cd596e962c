"""Journal conformance traces (SPEC §7, component `journal`; docs/trace-format.md "Journal
component").

A journal trace is a JSON Lines file like a run trace: a header line (component `journal`, plus
`config` with the journal's capacity) and one line per step. A step's `command` is a journal port
operation (`create`, `replace`, `remove`, `read`, `list`), the startup auditor's read-only scan
(`audit`), an ownership operation (`acquire`, `release`), the refresh timer (`refresh`: fire
it once; `timers`: what was started) or the Worker's terminal retention (`receipt`: publish a
completion receipt into the world's receipt store; `retention`: one call of §3.14 over the main
instance and that store, its result listing every journal and receipt call it made, in order),
optionally by another `actor` (`rival`: a second real
process on the same root), or a compound step (`batch`, `concurrent`, `race_acquire`). Faults
are ordinary steps: `crash_before_commit` / `crash_after_commit` / `io_error` on a mutation,
and the command-less `reopen` (restart: release, a new adapter instance acquires, optionally
with another stale window), `corrupt` (damaged bytes written through the backdoor), `clock`
(the world's clocks move forward) and `tamper` (the lock or the root's mode changed behind the
adapter's back). The expectation is the outcome (`ok`, `error` + code, `invalid`, `crashed`),
the result of a read, list, audit or retention, and the full canonical projection of the durable
journal read by a backdoor reader (with `<root>:mode` among the strays when the root is not
private, and the world's receipts, by Attempt, once it holds any).

Records appear in commands as their canonical document with the lease token as a placeholder
`{"token": "<name>"}` (`conformance.run.trace.trace_token`), and in projections with the token as
its
SHA-256 digest (`lease_token_sha256`): no trace holds a raw token.

This module is the codec (`dumps`, `loads`: strict, naming line and field), the projection and its
field-level diff, and the one mapping from a trace operation to a `JournalStore` call
(`call_store`), shared by the reference journal, the adapters' bindings and the rival process.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol, cast

from conformance.run.trace import (
    TRACE_VERSION,
    TokenNames,
    TraceFormatError,
    TraceHeader,
    canonical,
    trace_token,
)
from kernel.specs import HARD_LIMITS, Paging
from kernel.worker import (
    AuditResult,
    JournalCorrupt,
    JournalRecord,
    decode_record,
    encode_record,
)
from runners.worker.auditor import AuditedJournal, AuditRefused, StartupAuditor
from runners.worker.journal.port import JournalError, JournalPage, JournalStore
from runners.worker.posix.receipts import (
    Receipt,
    ReceiptStoreError,
    decode_receipt,
    encode_receipt,
)

__all__ = [
    "ACTORS",
    "CAPACITY_MAX",
    "COMPOUND",
    "CRASH_POINTS",
    "DAMAGES",
    "DEFAULT_CAPACITY",
    "ENVIRONMENT_FAULTS",
    "ERRNOS",
    "EXPECT_KINDS",
    "FAULT_KINDS",
    "IO_POINTS",
    "JOURNAL_CORPUS",
    "MUTATIONS",
    "OPERATIONS",
    "OWNERSHIP_COMMANDS",
    "RECEIPTS_MODE_STRAY",
    "RECEIPT_TAMPERS",
    "RECORD_MAX",
    "RETENTION_COMMANDS",
    "ROOT_MODE_STRAY",
    "TAMPERS",
    "Alternative",
    "JournalCommand",
    "JournalConfig",
    "JournalExpectation",
    "JournalFault",
    "JournalProjection",
    "JournalStep",
    "JournalTrace",
    "LoggedJournal",
    "LoggedReceipts",
    "OpResult",
    "Operation",
    "ReceiptPort",
    "RetentionCall",
    "SimulatedCrash",
    "TraceJournal",
    "audit_result",
    "call_store",
    "damaged",
    "decode_operation",
    "decode_trace_record",
    "dumps",
    "header_json",
    "is_journal_text",
    "journal_changes",
    "journal_diff",
    "loads",
    "outcome_vector",
    "page_result",
    "project_receipt",
    "project_record",
    "project_stored",
    "projection",
    "projection_digest",
    "receipt_trace_document",
    "record_trace_document",
    "retention_result",
    "show_lines",
    "step_label",
]

JOURNAL_CORPUS: Final = Path(__file__).resolve().parents[1] / "traces" / "journal"
RECORD_MAX: Final = HARD_LIMITS.journal_record_size_max_bytes
CAPACITY_MAX: Final = HARD_LIMITS.journal_capacity_max
DEFAULT_CAPACITY: Final = 64

MUTATIONS: Final = ("create", "replace", "remove")
#: `audit` runs the project's startup auditor (U-1..U-5) over the instance: a read-only scan.
#: `refresh` fires the main instance's refresh timer once; `timers` reports the timers it
#: started (W-4, F-11); both need the `ownership` capability (INBOX-23, INBOX-24).
OPERATIONS: Final = (*MUTATIONS, "read", "list", "acquire", "release", "audit")
OWNERSHIP_COMMANDS: Final = ("refresh", "timers")
#: `receipt` publishes a completion receipt into the world's receipt store; `retention` runs one
#: call of the Worker's terminal retention (§3.14) over the main instance and that store. Both
#: are of the main instance and need the `retention` capability (INBOX-39).
RETENTION_COMMANDS: Final = ("receipt", "retention")
COMPOUND: Final = ("batch", "concurrent", "race_acquire")
#: `main`: the adapter instance under test; `rival`: a second process on the same root;
#: `winner` / `loser`: whichever of the two won / lost the last `race_acquire`.
ACTORS: Final = ("main", "rival", "winner", "loser")
#: Adapter-neutral fault points of a mutation, in order. `start`: every check passed, nothing
#: written; `write`: the new bytes written, not synced; `sync`: written and synced, not
#: published; `publish`: published (link, rename, unlink, COMMIT), before the directory sync;
#: `finish`: everything done, the response not yet returned.
CRASH_POINTS: Final[Mapping[str, tuple[str, ...]]] = {
    "crash_before_commit": ("start", "write", "sync"),
    "crash_after_commit": ("publish", "finish"),
}
#: INBOX-43: where an OS error is injected: the write of the new bytes, their fsync, the publish.
IO_POINTS: Final = ("write", "fsync", "publish")
ERRNOS: Final = ("ENOSPC", "EIO", "EACCES")
#: How a `corrupt` step damages the stored bytes of one record (F-9).
DAMAGES: Final = ("truncated", "one_byte_short", "not_json", "empty", "schema_violation")
#: How a `tamper` step changes the root behind the adapter's back (INBOX-16, INBOX-22):
#: the lock directory removed or its mtime moved back one second; the root given group bits
#: (`0750`) or made private (`0700`) again; or the world's receipt directory likewise (every
#: receipt deletion then fails `RECEIPT_PERMISSIONS`: a failed receipt cleanup, INBOX-39).
RECEIPT_TAMPERS: Final = ("receipts_loosened", "receipts_restored")
TAMPERS: Final = (
    "lock_removed",
    "lock_mtime_changed",
    "root_loosened",
    "root_restored",
    *RECEIPT_TAMPERS,
)
#: `clock` moves the world's wall and monotonic clocks forward by `ms` (nothing else moves
#: them: a trace's timing is exact on any machine); `tamper` is one of `TAMPERS`; both, like a
#: `reopen` with a `stale_window_ms`, need the `ownership` capability.
FAULT_KINDS: Final = (
    "crash_before_commit",
    "crash_after_commit",
    "io_error",
    "reopen",
    "corrupt",
    "clock",
    "tamper",
)
ENVIRONMENT_FAULTS: Final = ("reopen", "corrupt", "clock", "tamper")
#: The stray a projection lists when the root is not private (`0700`, F-1).
ROOT_MODE_STRAY: Final = "<root>:mode"
#: The stray a projection lists when the world's receipt directory is not private.
RECEIPTS_MODE_STRAY: Final = "<receipts>:mode"
EXPECT_KINDS: Final = ("ok", "error", "invalid", "crashed", "batch", "concurrent")

JournalProjection = dict[str, list[Any]]


class SimulatedCrash(Exception):
    """The process died at a fault point: not an `OSError` nor a `JournalError`, so an adapter
    runs none of its error cleanup and the storage is left as a killed process leaves it."""


# -- values ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class JournalConfig:
    """How the replayer builds every adapter instance of the trace."""

    capacity: int = DEFAULT_CAPACITY


@dataclass(frozen=True, slots=True)
class JournalCommand:
    """One operation as the trace carries it (records as documents with token placeholders).
    A compound command (`batch`, `concurrent`) has `operations` and empty `args`."""

    name: str
    args: dict[str, Any]
    actor: str = "main"
    operations: tuple[JournalCommand, ...] = ()


@dataclass(frozen=True, slots=True)
class JournalFault:
    kind: str
    at: str | None = None  # crash / io_error: a point of CRASH_POINTS or IO_POINTS
    errno: str | None = None  # io_error: ENOSPC, EIO or EACCES
    offer_id: str | None = None  # corrupt: whose stored bytes
    damage: str | None = None  # corrupt: one of DAMAGES
    ms: int | None = None  # clock: how far both clocks move forward
    what: str | None = None  # tamper: one of TAMPERS
    stale_window_ms: int | None = None  # reopen: the new instance's stale window (W-4)


@dataclass(frozen=True, slots=True)
class Alternative:
    """One outcome of a concurrent step: the projection it leaves and every vector of per-
    operation outcomes (in the order the step lists them) that some serial order produces."""

    outcomes: tuple[tuple[str, ...], ...]
    projection: JournalProjection
    digest: str


@dataclass(frozen=True, slots=True)
class JournalExpectation:
    kind: str
    code: str | None
    result: Any
    projection: JournalProjection
    digest: str
    untouched: bool = False  # a refusal: the adapter reached none of its write points
    alternatives: tuple[Alternative, ...] = ()  # concurrent steps only


@dataclass(frozen=True, slots=True)
class JournalStep:
    step: int
    command: JournalCommand | None  # None for the fault steps `reopen` and `corrupt`
    expect: JournalExpectation
    fault: JournalFault | None = None
    observed_at_ms: int = 0  # journal operations take no observation time (SPEC §7 member)


@dataclass(frozen=True, slots=True)
class JournalTrace:
    header: TraceHeader
    config: JournalConfig
    steps: tuple[JournalStep, ...]


@dataclass(frozen=True, slots=True)
class Operation:
    """A decoded trace operation, ready for a `JournalStore`."""

    name: str
    record: JournalRecord | None = None
    expected_revision: int | None = None
    offer_id: str | None = None
    after: str | None = None
    limit: int | None = None
    paging: tuple[int, int] | None = None  # audit: (page size, pages)
    receipt: Receipt | None = None  # receipt
    retention: RetentionCall | None = None  # retention


@dataclass(frozen=True, slots=True)
class RetentionCall:
    """One `retention` step (§3.14): the Worker's terminal retention built with `retention_ms`,
    `page_size` and `delete_budget` (out of range: `invalid`), run once after `cursor` at
    `observed_at_ms`. The trace carries the values as they are, so a bound is a trace too."""

    cursor: str | None
    observed_at_ms: int
    retention_ms: int
    page_size: int
    delete_budget: int


@dataclass(frozen=True, slots=True)
class OpResult:
    """What one operation delivered. `reason` is the adapter's fixed reason (compared only with
    `expected_reason`, which a binding sets for the faults it injects); `touched` says whether
    the adapter reached one of its write points."""

    kind: str  # ok, error, invalid, crashed
    code: str | None = None
    result: Any = None
    reason: str | None = None
    touched: bool = False
    expected_reason: str | None = None

    @property
    def outcome(self) -> str:
        """`ok`, the error code, `invalid` or `crashed`: one entry of an outcome vector."""
        if self.kind == "error" and self.code is not None:
            return self.code
        return self.kind


class TraceJournal(JournalStore, Protocol):
    """A journal port with its ownership operations (both adapters, the reference)."""

    def acquire(self) -> None: ...

    def release(self) -> None: ...


# -- records in traces -----------------------------------------------------------------------
def record_trace_document(record: JournalRecord, names: TokenNames) -> dict[str, Any]:
    """The canonical record document with the lease token as `{"token": "<name>"}`."""
    document: dict[str, Any] = json.loads(encode_record(record))
    document["offer"]["lease"]["lease_token"] = names.name_of(record.offer.lease.lease_token)
    return document


def decode_trace_record(value: object, line: int, field: str) -> JournalRecord:
    """The revision a trace document stands for; it must be canonical and valid (§3.3)."""
    if not isinstance(value, dict):
        raise TraceFormatError(line, field, "must be a record document")
    try:
        placeholder = value["offer"]["lease"]["lease_token"]
    except (KeyError, TypeError):
        raise TraceFormatError(line, field, "offer.lease.lease_token: missing") from None
    if (
        not isinstance(placeholder, dict)
        or set(placeholder) != {"token"}
        or not isinstance(placeholder["token"], str)
        or not placeholder["token"]
    ):
        raise TraceFormatError(line, field, 'offer.lease.lease_token: must be {"token": "<name>"}')
    document = json.loads(json.dumps(value))
    token = trace_token(placeholder["token"])
    document["offer"]["lease"]["lease_token"] = token.reveal()
    try:
        record = decode_record(canonical(document).encode("utf-8"))
    except JournalCorrupt as exc:
        raise TraceFormatError(line, field, f"not a valid revision ({exc.field})") from None
    if record_trace_document(record, TokenNames()) != value:
        raise TraceFormatError(line, field, "not the canonical document of its record")
    return record


def receipt_trace_document(receipt: Receipt, names: TokenNames) -> dict[str, Any]:
    """The canonical receipt document with the callback token as `{"token": "<name>"}`."""
    document: dict[str, Any] = json.loads(encode_receipt(receipt))
    document["callback_token"] = names.name_of(receipt.callback_token)
    return document


def decode_trace_receipt(value: object, line: int, field: str) -> Receipt:
    """The receipt a trace document stands for; it must be canonical and valid (§3.11)."""
    if not isinstance(value, dict):
        raise TraceFormatError(line, field, "must be a receipt document")
    placeholder = value.get("callback_token")
    if (
        not isinstance(placeholder, dict)
        or set(placeholder) != {"token"}
        or not isinstance(placeholder["token"], str)
        or not placeholder["token"]
    ):
        raise TraceFormatError(line, field, 'callback_token: must be {"token": "<name>"}')
    document = dict(value) | {"callback_token": trace_token(placeholder["token"]).reveal()}
    try:
        receipt = decode_receipt(canonical(document).encode("utf-8"))
    except ReceiptStoreError as exc:
        raise TraceFormatError(line, field, f"not a valid receipt ({exc.reason})") from None
    if receipt_trace_document(receipt, TokenNames()) != value:
        raise TraceFormatError(line, field, "not the canonical document of its receipt")
    return receipt


# -- projection ------------------------------------------------------------------------------
def project_record(record: JournalRecord) -> dict[str, Any]:
    """A revision as every projection shows it: the canonical document, the lease token as its
    SHA-256 digest."""
    document: dict[str, Any] = json.loads(encode_record(record))
    lease = document["offer"]["lease"]
    del lease["lease_token"]
    lease["lease_token_sha256"] = record.offer.lease.lease_token.digest()
    return {"offer_id": record.offer_id, "record": document}


def project_stored(offer_id: str, data: bytes, revision: int | None = None) -> dict[str, Any]:
    """Stored bytes as the projection shows them: the record, or (F-9) `corrupt` with the size
    and SHA-256 of the bytes, never their content. `revision` is a revision kept beside the
    bytes (the SQLite column); it must equal the record's."""
    try:
        if not 0 < len(data) <= RECORD_MAX:
            raise JournalCorrupt("size")
        record = decode_record(data, offer_id)
        if revision is not None and revision != record.revision:
            raise JournalCorrupt("revision")
    except JournalCorrupt:
        return {
            "offer_id": offer_id,
            "corrupt": {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()},
        }
    return project_record(record)


def project_receipt(attempt_id: str, data: bytes) -> dict[str, Any]:
    """A stored receipt as every projection shows it: its document with the callback token as
    its SHA-256 digest, or `corrupt` with the size and SHA-256 of the bytes (never a token)."""
    try:
        receipt = decode_receipt(data)
    except ReceiptStoreError:
        receipt = None
    if receipt is None or receipt.attempt_id != attempt_id:
        return {
            "attempt_id": attempt_id,
            "corrupt": {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()},
        }
    document: dict[str, Any] = json.loads(encode_receipt(receipt))
    del document["callback_token"]
    document["callback_token_sha256"] = receipt.token_sha256()
    return {"attempt_id": attempt_id, "receipt": document}


def projection(
    stored: Iterable[tuple[str, bytes, int | None]],
    strays: Iterable[str] = (),
    receipts: Iterable[tuple[str, bytes]] = (),
) -> JournalProjection:
    """The canonical projection: every stored record (sorted by offer id), every visible
    entry that is not a record (`strays`: always empty for a conforming adapter) and, once the
    world's receipt store holds any, every receipt (sorted by Attempt ID; a projection without
    receipts has no `receipts` member, so the traces that never publish one keep their bytes)."""
    records = [project_stored(oid, data, revision) for oid, data, revision in stored]
    out: JournalProjection = {
        "records": sorted(records, key=lambda r: str(r["offer_id"])),
        "strays": sorted(strays),
    }
    held = sorted((project_receipt(aid, data) for aid, data in receipts), key=_attempt)
    if held:
        out["receipts"] = held
    return out


def _attempt(entry: Mapping[str, Any]) -> str:
    return str(entry["attempt_id"])


def projection_digest(value: object) -> str:
    return hashlib.sha256(canonical(value).encode("utf-8")).hexdigest()


def page_result(page: JournalPage) -> dict[str, Any]:
    """A `list` result: each record as offer id, revision and the digest of its projection."""
    return {
        "items": [
            {
                "offer_id": r.offer_id,
                "revision": r.revision,
                "digest": projection_digest(project_record(r)),
            }
            for r in page.records
        ],
        "cursor": page.cursor,
        "has_more": page.has_more,
    }


def damaged(data: bytes, damage: str) -> bytes:
    """The bytes a `corrupt` step writes in place of `data`."""
    if damage == "truncated":
        return data[: len(data) // 2]
    if damage == "one_byte_short":
        return data[:-1]
    if damage == "not_json":
        return b"\xff\xfe not json"
    if damage == "empty":
        return b""
    if damage == "schema_violation":
        document = json.loads(data)
        document["revision"] = str(document["revision"])
        return canonical(document).encode("utf-8")
    raise ValueError(f"damage: must be one of {DAMAGES}")


def _flat(value: object, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict) and value:
        out: dict[str, object] = {}
        for key in sorted(value):
            out.update(_flat(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _label(section: str, key: object) -> str:
    return f"{section}[{str(key)[:12]}]"


def _compare(
    before: JournalProjection, after: JournalProjection
) -> list[tuple[str, object, object]]:
    """(path, before, after) for every difference; a missing record or receipt is `None` on
    its side."""
    found: list[tuple[str, object, object]] = []
    for section, key in (("records", "offer_id"), ("receipts", "attempt_id")):
        want = {r[key]: r for r in before.get(section, [])}
        got = {r[key]: r for r in after.get(section, [])}
        for oid in sorted(want.keys() - got.keys()):
            found.append((_label(section, oid), want[oid], None))
        for oid in sorted(got.keys() - want.keys()):
            found.append((_label(section, oid), None, got[oid]))
        for oid in sorted(want.keys() & got.keys()):
            a, b = _flat(want[oid]), _flat(got[oid])
            for path in sorted(a.keys() | b.keys()):
                if a.get(path) != b.get(path):
                    found.append((f"{_label(section, oid)}.{path}", a.get(path), b.get(path)))
    if before.get("strays", []) != after.get("strays", []):
        found.append(("strays", before.get("strays", []), after.get("strays", [])))
    return found


def journal_diff(expected: JournalProjection, actual: JournalProjection) -> list[str]:
    """Field-level differences: `records[<offer id>].record.revision: expected 1, got 0`."""
    if expected == actual:
        return []
    lines: list[str] = []
    for path, a, b in _compare(expected, actual):
        if path.endswith("]") and b is None:
            lines.append(f"{path}: missing")
        elif path.endswith("]") and a is None:
            kind = "receipt" if path.startswith("receipts") else "record"
            lines.append(f"{path}: unexpected {kind}")
        else:
            lines.append(f"{path}: expected {a!r}, got {b!r}")
    return lines


def journal_changes(before: JournalProjection, after: JournalProjection) -> list[str]:
    """What a step changed: `records[..]: new record`, `records[..].record.state: a -> b`."""
    if before == after:
        return []
    lines: list[str] = []
    for path, a, b in _compare(before, after):
        if path.endswith("]") and a is None:
            lines.append(f"{path}: new {'receipt' if path.startswith('receipts') else 'record'}")
        elif path.endswith("]") and b is None:
            lines.append(f"{path}: removed")
        else:
            lines.append(f"{path}: {a!r} -> {b!r}")
    return lines


# -- operations ------------------------------------------------------------------------------
_ARGS: Final[Mapping[str, frozenset[str]]] = {
    "create": frozenset({"record"}),
    "replace": frozenset({"record", "expected_revision"}),
    "remove": frozenset({"offer_id", "expected_revision"}),
    "read": frozenset({"offer_id"}),
    "list": frozenset({"after", "limit"}),
    "acquire": frozenset(),
    "release": frozenset(),
    "race_acquire": frozenset(),
    "audit": frozenset({"page_size", "pages"}),
    "refresh": frozenset(),
    "timers": frozenset(),
    "receipt": frozenset({"receipt"}),
    "retention": frozenset(
        {"cursor", "observed_at_ms", "retention_ms", "page_size", "delete_budget"}
    ),
}


def _retention_call(args: Mapping[str, Any], line: int, field: str) -> RetentionCall:
    cursor = args["cursor"]
    if cursor is not None and not isinstance(cursor, str):
        raise TraceFormatError(line, f"{field}.cursor", "must be a string or null")
    numbers = ("observed_at_ms", "retention_ms", "page_size", "delete_budget")
    for key in numbers:
        if type(args[key]) is not int:
            raise TraceFormatError(line, f"{field}.{key}", "must be an integer")
    return RetentionCall(cursor, *(int(args[key]) for key in numbers))


def decode_operation(command: JournalCommand, line: int = 0) -> Operation:
    """The operation a (simple) trace command stands for; records are rebuilt from their
    documents with `trace_token`."""
    args = command.args
    field = "command.args"
    record = None
    if "record" in args:
        record = decode_trace_record(args["record"], line, f"{field}.record")
    expected = args.get("expected_revision")
    if "expected_revision" in args and (type(expected) is not int):
        raise TraceFormatError(line, f"{field}.expected_revision", "must be an integer")
    offer_id = args.get("offer_id")
    if "offer_id" in args and not isinstance(offer_id, str):
        raise TraceFormatError(line, f"{field}.offer_id", "must be a string")
    after = args.get("after")
    if after is not None and not isinstance(after, str):
        raise TraceFormatError(line, f"{field}.after", "must be a string or null")
    limit = args.get("limit")
    if "limit" in args and type(limit) is not int:
        raise TraceFormatError(line, f"{field}.limit", "must be an integer")
    paging = None
    if command.name == "audit":
        size, pages = args.get("page_size"), args.get("pages")
        if type(size) is not int or type(pages) is not int:
            raise TraceFormatError(line, f"{field}.page_size", "page_size, pages: integers")
        paging = (size, pages)
    receipt = None
    if command.name == "receipt":
        receipt = decode_trace_receipt(args.get("receipt"), line, f"{field}.receipt")
    retention = None
    if command.name == "retention":
        retention = _retention_call(args, line, field)
    return Operation(
        command.name, record, expected, offer_id, after, limit, paging, receipt, retention
    )


def audit_result(result: AuditResult | AuditRefused) -> OpResult:
    """An `audit` as every world reports it: the complete scan (U-5: status, counts per class,
    one `[offer_id, state, reason, class]` per record) or the refusal's code with the journal's
    code and the pages accepted before."""
    if isinstance(result, AuditRefused):
        journal_code = None if result.journal_code is None else result.journal_code.value
        return OpResult(
            "error",
            result.code.value,
            {"journal_code": journal_code, "pages": result.pages},
            reason="audit",
        )
    entries = [
        [
            e.offer_id,
            e.state.value,
            None if e.recovery_reason is None else e.recovery_reason.value,
            e.classification.value,
        ]
        for e in result.entries
    ]
    counts = {k.value: v for k, v in sorted(result.counts.items(), key=lambda kv: kv[0].value)}
    return OpResult(
        "ok", None, {"status": result.status.value, "counts": counts, "entries": entries}
    )


def _dispatch(store: TraceJournal, op: Operation) -> Any:
    if op.name == "create":
        assert op.record is not None
        store.create(op.record)
    elif op.name == "replace":
        assert op.record is not None
        assert op.expected_revision is not None
        store.replace(op.record, op.expected_revision)
    elif op.name == "remove":
        assert op.offer_id is not None
        assert op.expected_revision is not None
        store.remove(op.offer_id, op.expected_revision)
    elif op.name == "read":
        assert op.offer_id is not None
        found = store.read(op.offer_id)
        return None if found is None else project_record(found)
    elif op.name == "list":
        assert op.limit is not None
        return page_result(store.list(op.after, op.limit))
    elif op.name == "acquire":
        store.acquire()
    elif op.name == "release":
        store.release()
    elif op.name == "audit":
        assert op.paging is not None
        # Both adapters and the reference have the `capacity` the auditor checks its budget
        # against (U-2); a store without one fails the step as an exception.
        return StartupAuditor(cast(AuditedJournal, store), Paging(*op.paging)).audit()
    else:  # pragma: no cover - the codec admits no other name
        raise ValueError(f"not a journal operation: {op.name}")
    return None


def call_store(store: TraceJournal, op: Operation) -> OpResult:
    """One operation on a store, as every world reports it: a `JournalError` is `error` with
    its code, a `ValueError` (an argument outside the port's range, FJ-8) is `invalid`, a
    simulated crash is `crashed`."""
    try:
        value = _dispatch(store, op)
        if isinstance(value, AuditResult | AuditRefused):
            return audit_result(value)
    except SimulatedCrash:
        return OpResult("crashed")
    except JournalError as exc:
        return OpResult("error", exc.code.value, reason=exc.reason)
    except ValueError:
        return OpResult("invalid")
    return OpResult("ok", None, value)


# -- retention (§3.14) -----------------------------------------------------------------------
class ReceiptPort(Protocol):
    """The receipt store as retention uses it (`runners.worker.retention.ReceiptStorePort`)."""

    def read(self, attempt_id: str) -> Receipt | None: ...

    def delete(self, attempt_id: str) -> None: ...


Effects = list[list[Any]]


class LoggedJournal:
    """A journal port that logs every call made through it (`["list", after, limit]`,
    `["read", offer_id]`, `["remove", offer_id, expected_revision]`, ...) before forwarding it:
    a `retention` result lists what the retention did, in order (receipts first, §3.14)."""

    def __init__(self, store: JournalStore, log: Effects) -> None:
        self._store = store
        self._log = log

    def create(self, record: JournalRecord) -> None:
        self._log.append(["create", record.offer_id])
        self._store.create(record)

    def replace(self, record: JournalRecord, expected_revision: int) -> None:
        self._log.append(["replace", record.offer_id, expected_revision])
        self._store.replace(record, expected_revision)

    def remove(self, offer_id: str, expected_revision: int) -> None:
        self._log.append(["remove", offer_id, expected_revision])
        self._store.remove(offer_id, expected_revision)

    def read(self, offer_id: str) -> JournalRecord | None:
        self._log.append(["read", offer_id])
        return self._store.read(offer_id)

    def list(self, after: str | None, limit: int) -> JournalPage:
        self._log.append(["list", after, limit])
        return self._store.list(after, limit)


class LoggedReceipts:
    """The receipt store's counterpart of `LoggedJournal` (`read_receipt`, `delete_receipt`)."""

    def __init__(self, store: ReceiptPort, log: Effects) -> None:
        self._store = store
        self._log = log

    def read(self, attempt_id: str) -> Receipt | None:
        self._log.append(["read_receipt", attempt_id])
        return self._store.read(attempt_id)

    def delete(self, attempt_id: str) -> None:
        self._log.append(["delete_receipt", attempt_id])
        self._store.delete(attempt_id)


def retention_result(
    cursor: str | None,
    examined: int,
    *,
    deleted: Sequence[str],
    kept: Sequence[tuple[str, str, str | None]],
    code: str | None,
    effects: Effects,
) -> OpResult:
    """A `retention` as every world reports it: the next cursor, the records examined, the
    offer ids deleted, each eligible record kept as `[offer_id, reason, code]`, and every
    journal and receipt call made, in order; a page that could not be listed is `error` with
    the journal's code (nothing examined, the cursor unchanged)."""
    result = {
        "cursor": cursor,
        "examined": examined,
        "deleted": list(deleted),
        "kept": [list(k) for k in kept],
        "effects": effects,
    }
    if code is not None:
        return OpResult("error", code, result, reason="retention")
    return OpResult("ok", None, result)


# -- JSON Lines ------------------------------------------------------------------------------
def _command_json(command: JournalCommand) -> dict[str, Any]:
    args: dict[str, Any] = command.args
    if command.name in ("batch", "concurrent"):
        args = {"operations": [_command_json(c) for c in command.operations]}
    out: dict[str, Any] = {"name": command.name, "args": args}
    if command.actor != "main":
        out["actor"] = command.actor
    return out


def _fault_json(fault: JournalFault) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": fault.kind}
    for key in ("at", "errno", "offer_id", "damage", "ms", "what", "stale_window_ms"):
        value = getattr(fault, key)
        if value is not None:
            out[key] = value
    return out


def _step_json(step: JournalStep) -> dict[str, Any]:
    expect: dict[str, Any] = {
        "kind": step.expect.kind,
        "code": step.expect.code,
        "result": step.expect.result,
        "projection": step.expect.projection,
        "digest": step.expect.digest,
    }
    if step.expect.untouched:
        expect["untouched"] = True
    if step.expect.alternatives:
        expect["alternatives"] = [
            {
                "outcomes": [list(v) for v in a.outcomes],
                "projection": a.projection,
                "digest": a.digest,
            }
            for a in step.expect.alternatives
        ]
    out: dict[str, Any] = {
        "step": step.step,
        "observed_at_ms": step.observed_at_ms,
        "command": None if step.command is None else _command_json(step.command),
        "expect": expect,
    }
    if step.fault is not None:
        out["fault"] = _fault_json(step.fault)
    return out


def header_json(header: TraceHeader, config: JournalConfig) -> dict[str, Any]:
    return dataclasses.asdict(header) | {
        "capabilities": list(header.capabilities),
        "config": {"capacity": config.capacity},
    }


def dumps(trace: JournalTrace) -> str:
    lines = [canonical(header_json(trace.header, trace.config))]
    lines.extend(canonical(_step_json(step)) for step in trace.steps)
    return "\n".join(lines) + "\n"


def loads(text: str) -> JournalTrace:
    """Parse a journal trace strictly: unknown members, wrong types, a bad record document, a
    step out of order or a projection whose digest does not match are `TraceFormatError`s."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise TraceFormatError(1, "header", "empty trace")
    header, config = _header(_json(lines[0], 1), 1)
    steps = tuple(_step(_json(line, i), i) for i, line in enumerate(lines[1:], start=2))
    for index, step in enumerate(steps, start=1):
        if step.step != index:
            raise TraceFormatError(index + 1, "step", f"expected {index}, got {step.step}")
        if len(step.expect.alternatives) > 1 and index != len(steps):
            raise TraceFormatError(
                index + 1,
                "expect.alternatives",
                "a concurrent step that can leave different projections must be the last step",
            )
    return JournalTrace(header, config, steps)


def is_journal_text(text: str) -> bool:
    """Whether the first line of a trace names the journal component."""
    first = text.split("\n", 1)[0]
    try:
        value = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(value, dict) and value.get("component") == "journal"


def _json(line: str, number: int) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(number, "json", str(exc.msg)) from None
    if not isinstance(value, dict):
        raise TraceFormatError(number, "line", "must be an object")
    return value


def _take(
    obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], line: int, prefix: str = ""
) -> Any:
    if key not in obj:
        raise TraceFormatError(line, f"{prefix}{key}", "missing")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TraceFormatError(line, f"{prefix}{key}", "wrong type")
    return value


def _only(obj: Mapping[str, Any], allowed: Iterable[str], line: int, prefix: str) -> None:
    known = set(allowed)
    for key in obj:
        if key not in known:
            raise TraceFormatError(line, f"{prefix}{key}", "unknown member")


def _header(obj: dict[str, Any], line: int) -> tuple[TraceHeader, JournalConfig]:
    fields = {f.name for f in dataclasses.fields(TraceHeader)}
    _only(obj, fields | {"config"}, line, "")
    version = _take(obj, "trace_version", int, line)
    if version != TRACE_VERSION:
        raise TraceFormatError(line, "trace_version", f"unsupported version {version}")
    if _take(obj, "component", str, line) != "journal":
        raise TraceFormatError(line, "component", "a journal trace has component journal")
    capabilities = obj.get("capabilities", [])
    if not isinstance(capabilities, list) or not all(isinstance(c, str) for c in capabilities):
        raise TraceFormatError(line, "capabilities", "must be a list of strings")
    config_obj = _take(obj, "config", dict, line)
    _only(config_obj, {"capacity"}, line, "config.")
    capacity = _take(config_obj, "capacity", int, line, "config.")
    if not 1 <= capacity <= CAPACITY_MAX:
        raise TraceFormatError(line, "config.capacity", f"must be 1..{CAPACITY_MAX} (F-7)")
    header = TraceHeader(
        name=_take(obj, "name", str, line),
        component="journal",
        profile=_take(obj, "profile", str, line),
        seed=_take(obj, "seed", int, line),
        kernel_version=_take(obj, "kernel_version", str, line),
        trace_version=version,
        description=str(obj.get("description", "")),
        capabilities=tuple(capabilities),
    )
    return header, JournalConfig(capacity)


def _command(obj: object, line: int, *, nested: bool) -> JournalCommand:
    if not isinstance(obj, dict):
        raise TraceFormatError(line, "command", "must be an object")
    _only(obj, ("name", "args") if nested else ("name", "args", "actor"), line, "command.")
    name = _take(obj, "name", str, line, "command.")
    args = _take(obj, "args", dict, line, "command.")
    actor = obj.get("actor", "main")
    if actor not in ACTORS:
        raise TraceFormatError(line, "command.actor", f"must be one of {ACTORS}")
    allowed = (
        MUTATIONS if nested else (*OPERATIONS, *OWNERSHIP_COMMANDS, *RETENTION_COMMANDS, *COMPOUND)
    )
    if name not in allowed:
        raise TraceFormatError(line, "command.name", f"must be one of {allowed}")
    if name in ("batch", "concurrent"):
        if actor != "main":
            raise TraceFormatError(line, "command.actor", f"{name} runs on the main instance")
        _only(args, ("operations",), line, "command.args.")
        raw = _take(args, "operations", list, line, "command.args.")
        if len(raw) < 2:
            raise TraceFormatError(line, "command.args.operations", "needs two or more")
        if name == "concurrent" and len(raw) > 5:
            raise TraceFormatError(line, "command.args.operations", "at most 5 run concurrently")
        operations = tuple(_command(c, line, nested=True) for c in raw)
        return JournalCommand(name, {}, "main", operations)
    if name == "race_acquire" and actor != "main":
        raise TraceFormatError(line, "command.actor", "race_acquire is main against rival")
    if name in (*OWNERSHIP_COMMANDS, *RETENTION_COMMANDS) and actor != "main":
        raise TraceFormatError(line, "command.actor", f"{name} is of the main instance")
    required = _ARGS[name]
    _only(args, required, line, "command.args.")
    for key in sorted(required):
        if key not in args:
            raise TraceFormatError(line, f"command.args.{key}", "missing")
    command = JournalCommand(name, args, actor)
    decode_operation(command, line)  # records and argument types are checked here
    return command


def _fault(obj: object, line: int) -> JournalFault:
    if not isinstance(obj, dict):
        raise TraceFormatError(line, "fault", "must be an object")
    kind = _take(obj, "kind", str, line, "fault.")
    if kind not in FAULT_KINDS:
        raise TraceFormatError(line, "fault.kind", f"must be one of {FAULT_KINDS}")
    if kind in CRASH_POINTS:
        _only(obj, ("kind", "at"), line, "fault.")
        at = _take(obj, "at", str, line, "fault.")
        if at not in CRASH_POINTS[kind]:
            raise TraceFormatError(line, "fault.at", f"must be one of {CRASH_POINTS[kind]}")
        return JournalFault(kind, at=at)
    if kind == "io_error":
        _only(obj, ("kind", "at", "errno"), line, "fault.")
        at = _take(obj, "at", str, line, "fault.")
        if at not in IO_POINTS:
            raise TraceFormatError(line, "fault.at", f"must be one of {IO_POINTS}")
        errno_name = _take(obj, "errno", str, line, "fault.")
        if errno_name not in ERRNOS:
            raise TraceFormatError(line, "fault.errno", f"must be one of {ERRNOS}")
        return JournalFault(kind, at=at, errno=errno_name)
    if kind == "corrupt":
        _only(obj, ("kind", "offer_id", "damage"), line, "fault.")
        damage = _take(obj, "damage", str, line, "fault.")
        if damage not in DAMAGES:
            raise TraceFormatError(line, "fault.damage", f"must be one of {DAMAGES}")
        return JournalFault(
            kind, offer_id=_take(obj, "offer_id", str, line, "fault."), damage=damage
        )
    if kind == "clock":
        _only(obj, ("kind", "ms"), line, "fault.")
        ms = _take(obj, "ms", int, line, "fault.")
        if ms < 1:
            raise TraceFormatError(line, "fault.ms", "must be at least 1")
        return JournalFault(kind, ms=ms)
    if kind == "tamper":
        _only(obj, ("kind", "what"), line, "fault.")
        what = _take(obj, "what", str, line, "fault.")
        if what not in TAMPERS:
            raise TraceFormatError(line, "fault.what", f"must be one of {TAMPERS}")
        return JournalFault(kind, what=what)
    _only(obj, ("kind", "stale_window_ms"), line, "fault.")
    window = obj.get("stale_window_ms")
    if window is not None and type(window) is not int:
        raise TraceFormatError(line, "fault.stale_window_ms", "must be an integer")
    return JournalFault(kind, stale_window_ms=window)


def _check_fault(command: JournalCommand | None, fault: JournalFault | None, line: int) -> None:
    if fault is None:
        if command is None:
            raise TraceFormatError(line, "command", "only an environment step has none")
        return
    if fault.kind in ENVIRONMENT_FAULTS:
        if command is not None:
            raise TraceFormatError(line, "command", f"a {fault.kind} step has no command")
        return
    if command is None or command.name not in MUTATIONS or command.actor != "main":
        raise TraceFormatError(line, "fault", "a crash or io_error needs a main-actor mutation")
    if command.name == "remove" and fault.at in ("write", "sync", "fsync"):
        raise TraceFormatError(line, "fault.at", "a remove writes no bytes: start or publish")


def _projection(obj: Mapping[str, Any], line: int, field: str) -> JournalProjection:
    value = _take(obj, "projection", dict, line)
    _only(value, ("records", "strays", "receipts"), line, f"{field}.projection.")
    records = _take(value, "records", list, line)
    strays = _take(value, "strays", list, line)
    for record in records:
        if not isinstance(record, dict) or not isinstance(record.get("offer_id"), str):
            raise TraceFormatError(line, f"{field}.projection.records", "bad record entry")
        _only(record, ("offer_id", "record", "corrupt"), line, f"{field}.projection.records.")
        if ("record" in record) == ("corrupt" in record):
            raise TraceFormatError(
                line, f"{field}.projection.records", "an entry is a record or corrupt"
            )
    if not all(isinstance(s, str) for s in strays):
        raise TraceFormatError(line, f"{field}.projection.strays", "must be strings")
    out: JournalProjection = {"records": records, "strays": strays}
    if "receipts" in value:
        receipts = _take(value, "receipts", list, line)
        if not receipts:
            raise TraceFormatError(line, f"{field}.projection.receipts", "absent when empty")
        for receipt in receipts:
            if not isinstance(receipt, dict) or not isinstance(receipt.get("attempt_id"), str):
                raise TraceFormatError(line, f"{field}.projection.receipts", "bad receipt entry")
            _only(receipt, ("attempt_id", "receipt", "corrupt"), line, f"{field}.projection.")
            if ("receipt" in receipt) == ("corrupt" in receipt):
                raise TraceFormatError(
                    line, f"{field}.projection.receipts", "an entry is a receipt or corrupt"
                )
        out["receipts"] = receipts
    digest = _take(obj, "digest", str, line)
    if digest != projection_digest(value):
        raise TraceFormatError(line, f"{field}.digest", "does not match the projection")
    return out


def _expectation(obj: Mapping[str, Any], line: int) -> JournalExpectation:
    expect = _take(obj, "expect", dict, line)
    _only(
        expect,
        ("kind", "code", "result", "projection", "digest", "untouched", "alternatives"),
        line,
        "expect.",
    )
    kind = _take(expect, "kind", str, line, "expect.")
    if kind not in EXPECT_KINDS:
        raise TraceFormatError(line, "expect.kind", f"must be one of {EXPECT_KINDS}")
    code = expect.get("code")
    if code is not None and not isinstance(code, str):
        raise TraceFormatError(line, "expect.code", "must be a string or null")
    if (kind == "error") != (code is not None):
        raise TraceFormatError(line, "expect.code", "an error has a code, nothing else has")
    if "result" not in expect:
        raise TraceFormatError(line, "expect.result", "missing")
    untouched = expect.get("untouched", False)
    if untouched is not True and "untouched" in expect:
        raise TraceFormatError(line, "expect.untouched", "is true or absent")
    projected = _projection(expect, line, "expect")
    alternatives: list[Alternative] = []
    raw = expect.get("alternatives", [])
    if (kind == "concurrent") != bool(raw):
        raise TraceFormatError(line, "expect.alternatives", "exactly the concurrent steps")
    if not isinstance(raw, list):
        raise TraceFormatError(line, "expect.alternatives", "must be a list")
    for item in raw:
        if not isinstance(item, dict):
            raise TraceFormatError(line, "expect.alternatives", "must be objects")
        _only(item, ("outcomes", "projection", "digest"), line, "expect.alternatives.")
        vectors = _take(item, "outcomes", list, line, "expect.alternatives.")
        if not vectors or not all(
            isinstance(v, list) and all(isinstance(o, str) for o in v) for v in vectors
        ):
            raise TraceFormatError(line, "expect.alternatives.outcomes", "lists of strings")
        alt_projection = _projection(item, line, "expect.alternatives")
        alternatives.append(
            Alternative(tuple(tuple(v) for v in vectors), alt_projection, item["digest"])
        )
    if alternatives and alternatives[0].projection != projected:
        raise TraceFormatError(
            line, "expect.alternatives", "the first alternative is the step's projection"
        )
    return JournalExpectation(
        kind=kind,
        code=code,
        result=expect["result"],
        projection=projected,
        digest=expect["digest"],
        untouched=bool(untouched),
        alternatives=tuple(alternatives),
    )


def _step(obj: dict[str, Any], line: int) -> JournalStep:
    _only(obj, ("step", "observed_at_ms", "command", "fault", "expect"), line, "")
    if "command" not in obj:
        raise TraceFormatError(line, "command", "missing")
    raw_command = obj["command"]
    command = None if raw_command is None else _command(raw_command, line, nested=False)
    fault = None if obj.get("fault") is None else _fault(obj["fault"], line)
    _check_fault(command, fault, line)
    expect = _expectation(obj, line)
    if command is not None and command.name in ("concurrent", "race_acquire"):
        if expect.kind != "concurrent":
            raise TraceFormatError(line, "expect.kind", f"a {command.name} step is concurrent")
        width = 2 if command.name == "race_acquire" else len(command.operations)
        if any(len(v) != width for a in expect.alternatives for v in a.outcomes):
            raise TraceFormatError(line, "expect.alternatives.outcomes", "one per operation")
    elif expect.kind == "concurrent":
        raise TraceFormatError(line, "expect.kind", "only a concurrent step is concurrent")
    observed = _take(obj, "observed_at_ms", int, line)
    return JournalStep(_take(obj, "step", int, line), command, expect, fault, observed)


def outcome_vector(results: Sequence[OpResult]) -> tuple[str, ...]:
    return tuple(r.outcome for r in results)


def step_label(step: JournalStep) -> str:
    """`create`, `rival read`, `concurrent create+create`, `reopen`, `corrupt`, ..."""
    command = step.command
    if command is None:
        if step.fault is None:
            return "?"
        detail = step.fault.what or (None if step.fault.ms is None else f"+{step.fault.ms} ms")
        return step.fault.kind if detail is None else f"{step.fault.kind} {detail}"
    name = command.name
    if command.operations:
        name = f"{name} {'+'.join(c.name for c in command.operations)}"
    if command.actor != "main":
        name = f"{command.actor} {name}"
    if step.fault is not None:
        detail = (
            step.fault.at if step.fault.errno is None else f"{step.fault.at}:{step.fault.errno}"
        )
        name = f"{name} [{step.fault.kind} {detail}]"
    return name


def show_lines(trace: JournalTrace, *, full: bool = False) -> list[str]:
    """A readable view of a journal trace (`qlk traces show`): one line per step with its
    expected outcome, then what it changed in the projection."""
    header = trace.header
    lines = [
        f"{header.name}  [journal, profile {header.profile}, seed {header.seed}, "
        f"capacity {trace.config.capacity}]"
    ]
    if header.description:
        lines.append(f"  {header.description}")
    if header.capabilities:
        lines.append(f"  needs: {', '.join(header.capabilities)}")
    previous: JournalProjection = {"records": [], "strays": []}
    for step in trace.steps:
        expect = step.expect
        outcome = expect.kind + (f" {expect.code}" if expect.code else "")
        if expect.alternatives:
            outcome += " " + " | ".join(
                ",".join(v) for a in expect.alternatives for v in a.outcomes
            )
        elif isinstance(expect.result, list):
            outcome += f" {','.join(str(o) for o in expect.result)}"
        elif isinstance(expect.result, dict) and "items" in expect.result:
            outcome += (
                f" {len(expect.result['items'])} records has_more={expect.result['has_more']}"
            )
        elif isinstance(expect.result, dict) and "effects" in expect.result:
            outcome += (
                f" examined {expect.result['examined']}, deleted "
                f"{len(expect.result['deleted'])}, kept {len(expect.result['kept'])}"
            )
        if expect.untouched:
            outcome += " (before any write)"
        lines.append(f"{step.step:4d} {step_label(step)}: {outcome}")
        lines.extend(f"      {change}" for change in journal_changes(previous, expect.projection))
        if full:
            lines.append(f"      projection {canonical(expect.projection)}")
        previous = expect.projection
    return lines
