"""The reference journal: the oracle of the journal conformance suite (SPEC §7), in memory.

`ReferenceJournal` implements the journal port (`runners.worker.journal.port.JournalStore`) with the
ownership operations, from SPEC §3.9 and the kernel alone (no adapter code): the durable state of
a root is a map from offer id to the stored bytes (`kernel.worker.codec.encode_record`, exactly
what both adapters store), so corruption is a value like any other and a read decodes what is
there (F-9: corrupt bytes are reported, never skipped or deleted). Every operation checks in the
order the adapters do, so that when two refusals apply both name the same code:

    every operation   W-1 ownership (JOURNAL_NOT_OWNED in unowned/released)
    create            revision 0, F-2 size, exists (JOURNAL_RECORD_EXISTS), F-7 capacity
    replace           revision = expected + 1, F-2 size, the stored revision (missing or other:
                      JOURNAL_REVISION_CONFLICT; undecodable: JOURNAL_CORRUPT)
    remove            offer id, the stored revision as for replace
    read, list        offer ids and limit 1..64 (`ValueError`), then decode what is listed

A fault armed with `arm()` fires at the one write point of the next mutation, after every check
passed (an operation refused earlier never reaches it, as in the adapters): a crash before commit
changes nothing, a crash after commit applies the change, both raise `SimulatedCrash`; an
`io_error` changes nothing and fails `JOURNAL_PERMISSIONS`.

`ReferenceWorld` is the reference behind the journal world of a trace (`conformance.
journal_replay.JournalWorld`): the instance under test (`main`), a `rival` owner of the same root,
restarts and backdoor corruption, and a receipt store (`ReferenceReceipts`) for terminal
retention. Its retention (§3.14) is the kernel's alone, not the Worker runtime's
(`runners.worker.retention`, which the adapters' worlds run): `plan_page` decides what one call
deletes and the cursor, `steps_for` the order of each record's steps (`RETENTION_ORDER`:
confirm the revision, delete the receipt, remove the record), `kept_reason` why a failed step
keeps it, and `journal_step(RetentionDelete)` whether the record may go at all. It is what
`conformance.journal.corpus` records traces from; it is never itself a runner under test.
"""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Final

from conformance.journal.trace import (
    DEFAULT_CAPACITY,
    RECEIPTS_MODE_STRAY,
    RECORD_MAX,
    ROOT_MODE_STRAY,
    Effects,
    JournalCommand,
    JournalFault,
    JournalProjection,
    LoggedJournal,
    LoggedReceipts,
    Operation,
    OpResult,
    RetentionCall,
    SimulatedCrash,
    call_store,
    damaged,
    decode_operation,
    projection,
    retention_result,
)
from kernel.specs import (
    HARD_LIMITS,
    REFUSAL_CODES,
    Code,
    IntRange,
    OwnershipState,
    OwnershipTrigger,
    RetentionStep,
    check_in_range,
    next_ownership_state,
)
from kernel.worker import (
    JournalApplied,
    JournalCorrupt,
    JournalRecord,
    RetentionDelete,
    check_retention_ms,
    decode_record,
    encode_record,
    journal_step,
    kept_reason,
    observation_ms,
    plan_page,
    steps_for,
)
from runners.worker.journal.lock import DEFAULT_STALE_WINDOW_MS
from runners.worker.journal.port import JournalError, JournalPage
from runners.worker.posix.receipts import (
    Receipt,
    ReceiptDeleteError,
    ReceiptErrorCode,
    ReceiptStoreError,
    ReceiptWriteError,
    encode_receipt,
)

__all__ = ["ReferenceJournal", "ReferenceReceipts", "ReferenceRoot", "ReferenceWorld"]

_OFFER_ID: Final = re.compile(r"[0-9a-f]{64}")
_PAGE_MAX: Final = HARD_LIMITS.journal_list_page_max
_CAPACITY_MAX: Final = HARD_LIMITS.journal_capacity_max
_WINDOW: Final = HARD_LIMITS.journal_stale_window_ms
_REFRESH_DIVISOR: Final = HARD_LIMITS.journal_refresh_divisor  # W-4: every half window
_RETENTION_PAGE: Final = IntRange(1, HARD_LIMITS.terminal_retention_page_size_max)
_RETENTION_DELETES: Final = IntRange(1, HARD_LIMITS.terminal_retention_deletes_max)
_IDS = itertools.count(1)


@dataclass
class ReferenceRoot:
    """The durable state of one journal root: stored bytes by offer id, the lock (its holder
    and mtime), whether the root is private (F-1), and the world's clock (both clocks: only a
    `clock` step moves them, so a wall-clock and a monotonic difference are the same)."""

    stored: dict[str, bytes] = field(default_factory=dict)
    holder: int | None = None  # the `instance_id` of the owner whose lock is in the root
    lock_mtime_ms: int = 0
    private: bool = True
    now_ms: int = 0


def _offer_id(value: object) -> str:
    if not isinstance(value, str) or _OFFER_ID.fullmatch(value) is None:
        raise ValueError("offer_id: must be 64 lowercase hex digits")
    return value


class ReferenceJournal:
    """One would-be owner of a `ReferenceRoot` with the journal port (see the module doc)."""

    def __init__(
        self,
        root: ReferenceRoot,
        *,
        capacity: int = DEFAULT_CAPACITY,
        stale_window_ms: int = DEFAULT_STALE_WINDOW_MS,
    ) -> None:
        if type(capacity) is not int or not 1 <= capacity <= _CAPACITY_MAX:
            raise ValueError(f"capacity: must be 1..{_CAPACITY_MAX} (F-7)")
        self.window_ms = check_in_range(stale_window_ms, _WINDOW, field="stale_window_ms")
        self.root = root
        self.capacity = capacity
        self.stamped_ms = 0  # the lock mtime this owner last wrote (W-5)
        self.refreshed_ms = 0  # when this owner's last verification-with-stamp succeeded
        self.timers_started = 0  # one refresh timer per tenure (W-4, F-11)
        self.instance_id = next(_IDS)
        self.state = OwnershipState.UNOWNED
        self._fault: JournalFault | None = None
        self.touched = False
        self.fired = False

    def __repr__(self) -> str:
        return f"ReferenceJournal(state={self.state.value}, capacity={self.capacity})"

    # -- faults --------------------------------------------------------------------------------
    def arm(self, fault: JournalFault | None) -> None:
        """The fault of the next mutation (None: none); resets `touched` and `fired`."""
        self._fault = fault
        self.touched = False
        self.fired = False

    def _write(self, apply: Callable[[], object]) -> None:
        """The one write point of a mutation: every check passed."""
        self.touched = True
        fault, self._fault = self._fault, None
        if fault is None:
            apply()
            return
        self.fired = True
        if fault.kind == "crash_before_commit":
            raise SimulatedCrash("crash before commit")
        if fault.kind == "crash_after_commit":
            apply()
            raise SimulatedCrash("crash after commit")
        if fault.kind == "io_error":
            raise JournalError(Code.JOURNAL_PERMISSIONS, f"{fault.at}:{fault.errno}")
        raise ValueError(f"fault {fault.kind}: not a mutation fault")  # pragma: no cover

    # -- ownership (W-1..W-7 as the kernel's data) -------------------------------------------
    def _transition(self, trigger: OwnershipTrigger) -> None:
        after = next_ownership_state(self.state, trigger)
        assert after is not None, (self.state, trigger)
        self.state = after

    def _refusal(self) -> JournalError:
        return JournalError(REFUSAL_CODES[self.state], "ownership")

    def acquire(self) -> None:
        """W-2/W-3, F-1: in `owned` a verification; a lock at most the stale window old is
        live (`JOURNAL_LOCKED`), an older one is reclaimed; a root with group or other bits is
        `JOURNAL_PERMISSIONS`."""
        if self.state is OwnershipState.OWNED:
            self._require_owned()
            return
        if self.state is OwnershipState.COMPROMISED:
            raise self._refusal()
        root = self.root
        if not root.private:
            raise JournalError(Code.JOURNAL_PERMISSIONS, "root_mode")
        if root.holder is not None and root.now_ms - root.lock_mtime_ms <= self.window_ms:
            raise JournalError(Code.JOURNAL_LOCKED, "lock_held")
        root.holder = self.instance_id  # a stale lock is reclaimed (W-3 [decision W-3])
        root.lock_mtime_ms = self.stamped_ms = self.refreshed_ms = root.now_ms
        self._transition(OwnershipTrigger.ACQUIRED)
        self.timers_started += 1

    def release(self) -> None:
        """W-7: verify, then remove the lock; a failed verification compromises (W-6)."""
        if self.state is OwnershipState.RELEASED:
            return
        self._require_owned()
        self.root.holder = None
        self._transition(OwnershipTrigger.RELEASED)

    def refresh(self) -> bool | None:
        """One tick of the refresh timer (W-4): None when no timer runs (not `owned`: released,
        compromised or never acquired), else whether the verification and stamp succeeded."""
        if self.state is not OwnershipState.OWNED:
            return None
        try:
            self._require_owned()
        except JournalError:
            return False
        self.root.lock_mtime_ms = self.stamped_ms = self.refreshed_ms = self.root.now_ms
        return True

    def _require_owned(self) -> None:
        """W-1 and W-5: owned, the lock is this owner's with the mtime it wrote, and the last
        refresh is no older than the stale window; any failure compromises for good (W-6)."""
        if self.state is not OwnershipState.OWNED:
            raise self._refusal()
        root = self.root
        if (
            root.holder != self.instance_id
            or root.lock_mtime_ms != self.stamped_ms
            or root.now_ms - self.refreshed_ms > self.window_ms
        ):
            self._transition(OwnershipTrigger.VERIFICATION_FAILED)
            raise self._refusal()
        self._transition(OwnershipTrigger.VERIFIED)

    # -- the port --------------------------------------------------------------------------
    @staticmethod
    def _encode(record: JournalRecord) -> bytes:
        data = encode_record(record)
        if len(data) > RECORD_MAX:
            raise JournalError(Code.JOURNAL_RECORD_TOO_LARGE, "record_size")
        return data

    def _stored(self, offer_id: str) -> JournalRecord | None:
        data = self.root.stored.get(offer_id)
        if data is None:
            return None
        try:
            if not 0 < len(data) <= RECORD_MAX:
                raise JournalCorrupt("size")
            return decode_record(data, offer_id)
        except JournalCorrupt as exc:
            raise JournalError(Code.JOURNAL_CORRUPT, exc.field) from None

    def create(self, record: JournalRecord) -> None:
        self._require_owned()
        if record.revision != 0:
            raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "create_requires_revision_0")
        data = self._encode(record)
        stored = self.root.stored
        if record.offer_id in stored:
            raise JournalError(Code.JOURNAL_RECORD_EXISTS, "exists")
        if len(stored) >= self.capacity:
            raise JournalError(Code.JOURNAL_FULL, "capacity")  # F-7: nothing is evicted
        self._write(lambda: stored.__setitem__(record.offer_id, data))

    def replace(self, record: JournalRecord, expected_revision: int) -> None:
        self._require_owned()
        if type(expected_revision) is not int or record.revision != expected_revision + 1:
            raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "revision_not_expected_plus_1")
        data = self._encode(record)
        current = self._stored(record.offer_id)
        if current is None:
            raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "missing")
        if current.revision != expected_revision:
            raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "stored_revision")
        stored = self.root.stored
        self._write(lambda: stored.__setitem__(record.offer_id, data))

    def remove(self, offer_id: str, expected_revision: int) -> None:
        self._require_owned()
        _offer_id(offer_id)
        current = self._stored(offer_id)
        if current is None:
            raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "missing")
        if type(expected_revision) is not int or current.revision != expected_revision:
            raise JournalError(Code.JOURNAL_REVISION_CONFLICT, "stored_revision")
        stored = self.root.stored
        self._write(lambda: stored.__delitem__(offer_id))

    def read(self, offer_id: str) -> JournalRecord | None:
        self._require_owned()
        return self._stored(_offer_id(offer_id))

    def list(self, after: str | None, limit: int) -> JournalPage:
        self._require_owned()
        if type(limit) is not int or not 1 <= limit <= _PAGE_MAX:
            raise ValueError(f"limit: must be 1..{_PAGE_MAX}")
        if after is not None:
            _offer_id(after)
        later = sorted(oid for oid in self.root.stored if after is None or oid > after)
        records = []
        for oid in later[:limit]:
            found = self._stored(oid)
            assert found is not None
            records.append(found)
        cursor = records[-1].offer_id if records else after
        return JournalPage(tuple(records), cursor, len(later) > limit)


def _code(value: str | None) -> Code | str | None:
    """The kernel's code for `kept_reason` (a receipt store's code stays a string)."""
    try:
        return None if value is None else Code(value)
    except ValueError:
        return value


class ReferenceReceipts:
    """The world's completion receipt store (§3.11), in memory: receipts by Attempt ID and
    whether the directory is private. As the POSIX store: a directory that is not private
    fails every publish and delete with `RECEIPT_PERMISSIONS`; a second publish for one
    Attempt is `RECEIPT_EXISTS` (a receipt is immutable); deleting a missing one succeeds."""

    def __init__(self) -> None:
        self.stored: dict[str, Receipt] = {}
        self.private = True

    def _check(self, error: type[ReceiptStoreError]) -> None:
        if not self.private:
            raise error(ReceiptErrorCode.RECEIPT_PERMISSIONS, "directory_mode")

    def publish(self, receipt: Receipt) -> None:
        self._check(ReceiptWriteError)
        if receipt.attempt_id in self.stored:
            raise ReceiptWriteError(ReceiptErrorCode.RECEIPT_EXISTS, "exists")
        self.stored[receipt.attempt_id] = receipt

    def read(self, attempt_id: str) -> Receipt | None:
        return self.stored.get(attempt_id)

    def delete(self, attempt_id: str) -> None:
        self._check(ReceiptDeleteError)
        self.stored.pop(attempt_id, None)


def _retention_step(
    step: RetentionStep,
    record: JournalRecord,
    journal: LoggedJournal,
    receipts: LoggedReceipts,
    observed_at_ms: int,
) -> tuple[str | None, bool] | None:
    """One §3.14 step on the reference: `None` when it succeeded, else `(code, refused by the
    kernel)`."""
    try:
        if step is RetentionStep.CONFIRM_REVISION:
            if journal.read(record.offer_id) != record:
                return Code.JOURNAL_REVISION_CONFLICT.value, False
        elif step is RetentionStep.DELETE_RECEIPT:
            receipts.delete(record.offer.lease.attempt_id)
        else:
            now = observation_ms(record, observed_at_ms)
            decided = journal_step(record, RetentionDelete(), now)
            if not isinstance(decided, JournalApplied) or decided.record is not None:
                return decided.code.value, True
            journal.remove(record.offer_id, record.revision)
    except JournalError as exc:
        return exc.code.value, False
    except ReceiptStoreError as exc:
        return exc.code.value, False
    return None


class ReferenceWorld:
    """The reference behind a journal trace: `main` (restarted by `reopen`), a `rival` owner of
    the same root, and the backdoor (see the module docstring). Concurrent operations run one
    after another in the order given; `race_acquire` lets `main` try first."""

    name = "reference"
    capabilities = frozenset(
        {"faults", "corruption", "second_process", "concurrency", "ownership", "retention"}
    )

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self.root = ReferenceRoot()
        self.receipts = ReferenceReceipts()
        self.main = ReferenceJournal(self.root, capacity=capacity)
        self.rival = ReferenceJournal(self.root, capacity=capacity)
        self.crashed = False  # the main instance died at a fault; only `reopen` follows

    def _store(self, actor: str) -> ReferenceJournal:
        if actor == "rival":
            return self.rival
        if self.crashed:
            raise RuntimeError("the main instance crashed: a reopen step must come first")
        return self.main

    def call(self, actor: str, command: JournalCommand, fault: JournalFault | None) -> OpResult:
        store = self._store(actor)
        store.arm(fault)
        result = call_store(store, decode_operation(command))
        touched = store.touched
        store.arm(None)
        if result.kind == "crashed":
            self.crashed = True
        return OpResult(result.kind, result.code, result.result, result.reason, touched)

    def concurrent(self, commands: Sequence[JournalCommand]) -> list[OpResult]:
        return [self.call("main", command, None) for command in commands]

    def race_acquire(self) -> tuple[OpResult, OpResult]:
        acquire = JournalCommand("acquire", {})
        return self.call("main", acquire, None), self.call("rival", acquire, None)

    def reopen(self, stale_window_ms: int | None = None) -> OpResult:
        """Restart: the old main instance releases its lock if it can (a dead process's lock,
        cleared as a stale reclaim would; a compromised owner's lock stays), a new instance
        (with `stale_window_ms`, if given) acquires. A window outside 5 s..5 min is `invalid`
        and leaves a new unowned instance with the default window."""
        with contextlib.suppress(JournalError):
            self.main.release()
        self.crashed = False
        try:
            self.main = ReferenceJournal(
                self.root,
                capacity=self.capacity,
                **({} if stale_window_ms is None else {"stale_window_ms": stale_window_ms}),
            )
        except ValueError:
            self.main = ReferenceJournal(self.root, capacity=self.capacity)
            return OpResult("invalid")
        return call_store(self.main, Operation("acquire"))

    def advance(self, ms: int) -> OpResult:
        self.root.now_ms += ms
        return OpResult("ok")

    def tamper(self, what: str) -> OpResult:
        root = self.root
        if what in ("receipts_loosened", "receipts_restored"):
            self.receipts.private = what == "receipts_restored"
            return OpResult("ok")
        if what in ("lock_removed", "lock_mtime_changed") and root.holder is None:
            raise RuntimeError(f"tamper {what}: there is no lock")
        if what == "lock_removed":
            root.holder = None
        elif what == "lock_mtime_changed":
            root.lock_mtime_ms -= 1_000
        else:
            root.private = what == "root_restored"
        return OpResult("ok")

    def refresh(self) -> OpResult:
        return OpResult("ok", None, self.main.refresh())

    def timers(self) -> OpResult:
        """The refresh timers the main instance started, the last one's interval (half the
        stale window, W-4) and the threads it started beyond them (none: one timer, F-11)."""
        main = self.main
        interval = main.window_ms // _REFRESH_DIVISOR if main.timers_started else None
        return OpResult(
            "ok", None, {"started": main.timers_started, "interval_ms": interval, "threads": 0}
        )

    def receipt(self, receipt: Receipt) -> OpResult:
        """Publish a completion receipt (as the launch wrapper would)."""
        try:
            self.receipts.publish(receipt)
        except ReceiptStoreError as exc:
            return OpResult("error", exc.code.value, reason=exc.reason)
        return OpResult("ok")

    def retention(self, call: RetentionCall) -> OpResult:
        """One call of §3.14 over `main` and the receipts, from the kernel alone (module doc).
        A bound outside its range (retention 1 min..30 days, page 1..64, deletes 1..64, a
        negative observation time) is `invalid` before any call."""
        try:
            check_retention_ms(call.retention_ms)
            check_in_range(call.page_size, _RETENTION_PAGE, field="page_size")
            check_in_range(call.delete_budget, _RETENTION_DELETES, field="delete_budget")
            if call.observed_at_ms < 0:
                raise ValueError("observed_at_ms")
        except ValueError:
            return OpResult("invalid")
        effects: Effects = []
        journal = LoggedJournal(self._store("main"), effects)
        receipts = LoggedReceipts(self.receipts, effects)
        try:
            page = journal.list(call.cursor, call.page_size)
        except JournalError as exc:
            return retention_result(
                call.cursor, 0, deleted=(), kept=(), code=exc.code.value, effects=effects
            )
        except ValueError:
            return OpResult("invalid")
        plan = plan_page(
            page.records,
            has_more=page.has_more,
            cursor=call.cursor,
            observed_at_ms=call.observed_at_ms,
            retention_ms=call.retention_ms,
            delete_budget=call.delete_budget,
        )
        deleted: list[str] = []
        kept: list[tuple[str, str, str | None]] = []
        for record in plan.delete:
            for step in steps_for(record):
                failure = _retention_step(step, record, journal, receipts, call.observed_at_ms)
                if failure is not None:
                    code, refused = failure
                    reason = kept_reason(step, _code(code), refused=refused)
                    kept.append((record.offer_id, reason.value, code))
                    break
            else:
                deleted.append(record.offer_id)
        return retention_result(
            plan.cursor, plan.examined, deleted=deleted, kept=kept, code=None, effects=effects
        )

    def corrupt(self, offer_id: str, damage: str) -> OpResult:
        data = self.root.stored.get(offer_id)
        if data is None:
            raise RuntimeError("corrupt: the offer has no stored bytes")
        self.root.stored[offer_id] = damaged(data, damage)
        return OpResult("ok")

    def project(self) -> JournalProjection:
        strays = () if self.root.private else (ROOT_MODE_STRAY,)
        if not self.receipts.private:
            strays = (*strays, RECEIPTS_MODE_STRAY)
        return projection(
            ((oid, data, None) for oid, data in self.root.stored.items()),
            strays,
            ((aid, encode_receipt(r)) for aid, r in self.receipts.stored.items()),
        )

    def close(self) -> None:
        return None
