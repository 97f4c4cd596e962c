"""The Worker execution offer inbox lifecycle (SPEC §3.10, §3.13; ADR-0021 §5; INBOX-28).

`WorkerExecutionOfferInboxLifecycle(journal, audit_budget, recovery=None)` walks the kernel's
table (`kernel.specs.inbox_lifecycle.INBOX_TABLE`) and nothing else:

    inert -> acquiring -> auditing -> [recovering -> reauditing] -> holding -> stopping -> stopped
                             any failure after acquire: release ownership, then -> refused

- Order: `acquire()`, audit, optional recovery, re-audit, hold. Recovery runs only when it was
  injected and the audit has a `settled_completion`, `launch_reconciliation` or
  `execution_reconciliation` entry [decision §3.10]; it runs at most once per start.
- A complete audit (`ready` or `reconciliation_required`) holds the lock until `stop()`.
- Scan budget exhausted, cursor invalid, corrupt journal, any audit exception, a recovery that
  refuses (e.g. `RECOVERY_ACTION_BUDGET_EXHAUSTED`) or raises: ownership is released FIRST, then
  the state becomes `refused` with a low-sensitivity code (S-1: never an exception text).
- A failed `acquire()` (e.g. `JOURNAL_LOCKED`) refuses too; nothing was taken, so nothing is
  released.
- The lifecycle owns no timer (the ownership refresh timer belongs to the journal adapter, F-11)
  and starts no transport; it has no transport port at all.
- `start()` and `stop()` are serialized by one lock: a `stop()` racing a `start()` waits for
  the bounded startup to settle and then stops what it holds. A second `start()` is a no-op
  (L-1); the lifecycle is single-use (`stopped` and `refused` are terminal) [decision IL-2].
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Protocol

from kernel.specs import (
    HOLDS_OWNERSHIP,
    Code,
    InboxCode,
    InboxState,
    InboxTrigger,
    Paging,
    next_inbox_state,
)
from kernel.worker import AuditResult, needs_recovery
from runners.worker.auditor import AuditRefused, StartupAuditor
from runners.worker.journal.port import JournalError, JournalPage

__all__ = [
    "InboxEdge",
    "InboxJournal",
    "InboxStatus",
    "RecoveryReport",
    "StartupRecovery",
    "WorkerExecutionOfferInboxLifecycle",
]


class InboxJournal(Protocol):
    """The journal as the lifecycle sees it: ownership (W-2, W-7) plus what the auditor reads.
    `FileJournal` and `SqliteJournal` both fit."""

    def acquire(self) -> None: ...

    def release(self) -> None: ...

    def list(self, after: str | None, limit: int) -> JournalPage: ...

    @property
    def capacity(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What an injected startup recovery reports about its one bounded batch (§3.13).

    `refused`: the recovery failed closed before (or instead of) its batch, e.g.
    `RECOVERY_ACTION_BUDGET_EXHAUSTED` or an incomplete audit; the lifecycle then releases and
    refuses. `None`: the batch ran; item failures (`failed_items`, each with its own code kept
    by the supervisor) do not refuse startup, the overall `status` simply stays
    `reconciliation_required`. Codes and counts only (S-1)."""

    refused: Code | None = None
    status: Code = Code.READY
    actions: int = 0
    failed_items: int = 0


class StartupRecovery(Protocol):
    """The startup recovery supervisor as the lifecycle calls it (§3.13): one complete audit in,
    one report out. The real supervisor is plugged in by its runner."""

    def __call__(self, audit: AuditResult) -> RecoveryReport: ...


@dataclass(frozen=True, slots=True)
class InboxEdge:
    """One step the lifecycle took: an edge of `INBOX_TABLE`."""

    source: InboxState
    trigger: InboxTrigger
    target: InboxState


@dataclass(frozen=True, slots=True)
class InboxStatus:
    """The lifecycle's state and why (S-1: ids, states, codes and counts only).

    `code`: the audit status while holding (`ready` / `reconciliation_required`), the refusal
    code when refused, else None. `audit`: the last complete audit (the re-audit after a
    recovery). `release_code`: set when a release (on refusal or stop) failed, e.g.
    `JOURNAL_COMPROMISED` (W-6 leaves such a lock alone)."""

    state: InboxState
    code: Code | InboxCode | None = None
    audit: AuditResult | None = None
    recovery: RecoveryReport | None = None
    release_code: Code | InboxCode | None = None


class WorkerExecutionOfferInboxLifecycle:
    """§3.10's inbox lifecycle; see the module docstring. Constructing it checks the audit
    budget against the journal's capacity (U-2) and does no I/O (L-1: inert)."""

    def __init__(
        self,
        journal: InboxJournal,
        audit_budget: Paging,
        *,
        recovery: StartupRecovery | None = None,
    ) -> None:
        self._journal = journal
        self._auditor = StartupAuditor(journal, audit_budget)
        self._recovery = recovery
        self._lock = threading.Lock()  # serializes start() and stop()
        self._status = InboxStatus(InboxState.INERT)
        self._history: list[InboxEdge] = []

    # -- views ---------------------------------------------------------------------------------

    @property
    def state(self) -> InboxState:
        return self._status.state

    @property
    def status(self) -> InboxStatus:
        return self._status

    @property
    def history(self) -> tuple[InboxEdge, ...]:
        """Every edge taken so far, in order."""
        return tuple(self._history)

    def __repr__(self) -> str:
        return f"WorkerExecutionOfferInboxLifecycle(state={self.state.value})"

    # -- operations ----------------------------------------------------------------------------

    def start(self) -> InboxStatus:
        """Acquire, audit, [recover, re-audit], hold; or refuse. A no-op unless inert."""
        with self._lock:
            if next_inbox_state(self.state, InboxTrigger.START) is None:
                return self._status  # L-1: started already (or stopped): the table has no edge
            self._move(InboxTrigger.START)
            if not self._acquire():
                return self._status
            self._move(InboxTrigger.ACQUIRED)
            audit = self._audit()
            if audit is None:
                return self._status
            if self._recovery is not None and needs_recovery(audit):
                self._move(InboxTrigger.RECOVERY_NEEDED)
                report = self._recover(self._recovery, audit)
                if report is None:
                    return self._status
                self._move(InboxTrigger.RECOVERED, recovery=report)
                audit = self._audit()
                if audit is None:
                    return self._status
            self._move(InboxTrigger.AUDIT_COMPLETE, code=audit.status, audit=audit)
            return self._status

    def stop(self) -> InboxStatus:
        """Release the held ownership (holding -> stopping -> stopped). Before `start()` the
        lifecycle goes straight to `stopped`; `refused` and `stopped` stay as they are."""
        with self._lock:
            if next_inbox_state(self.state, InboxTrigger.STOP) is None:
                return self._status  # `refused` and `stopped` stay as they are
            holding = self.state in HOLDS_OWNERSHIP
            self._move(InboxTrigger.STOP, **({"code": None} if holding else {}))
            if holding:  # W-7: the ownership taken at start is released on the way out
                release_code = self._release()
                self._move(InboxTrigger.RELEASED, release_code=release_code)
            return self._status

    # -- steps -----------------------------------------------------------------------------------

    def _move(self, trigger: InboxTrigger, **changes: object) -> None:
        """Take one table edge (anything else is a bug: raise before changing anything)."""
        source = self._status.state
        target = next_inbox_state(source, trigger)
        if target is None:
            raise RuntimeError(f"inbox lifecycle: {trigger} is not an edge from {source}")
        fields: dict[str, object] = {
            "code": self._status.code,
            "audit": self._status.audit,
            "recovery": self._status.recovery,
            "release_code": self._status.release_code,
        }
        fields.update(changes)
        self._status = InboxStatus(target, **fields)  # type: ignore[arg-type]
        self._history.append(InboxEdge(source, trigger, target))

    def _acquire(self) -> bool:
        code: Code | InboxCode
        try:
            self._journal.acquire()
        except JournalError as exc:
            code = exc.code
        except Exception:  # S-1: the refusal is a fixed code, never the exception text
            code = InboxCode.ACQUIRE_FAILED
        else:
            return True
        self._move(InboxTrigger.ACQUIRE_FAILED, code=code)
        return False

    def _audit(self) -> AuditResult | None:
        """One complete audit, or None after releasing and refusing."""
        try:
            result = self._auditor.audit()
        except Exception:  # §3.10: any audit exception refuses (after the release)
            self._refuse(InboxCode.AUDIT_FAILED)
            return None
        if isinstance(result, AuditRefused):
            self._refuse(result.code)
            return None
        return result

    def _recover(self, recovery: StartupRecovery, audit: AuditResult) -> RecoveryReport | None:
        try:
            report = recovery(audit)
        except Exception:  # fail closed: what the batch did is unknown, so do not hold
            self._refuse(InboxCode.RECOVERY_FAILED)
            return None
        if report.refused is not None:
            self._refuse(report.refused, recovery=report)
            return None
        return report

    def _refuse(self, code: Code | InboxCode, **changes: object) -> None:
        """§3.10: release ownership FIRST, then refuse (the edge is taken only afterwards)."""
        release_code = self._release()
        self._move(InboxTrigger.REFUSED, code=code, release_code=release_code, **changes)

    def _release(self) -> Code | InboxCode | None:
        try:
            self._journal.release()
        except JournalError as exc:
            return exc.code
        except Exception:
            return InboxCode.RELEASE_FAILED
        return None
