"""The cluster runner's production entry points: database time, the Attempt advisory lock, and
a bounded retry of transient conflicts (ADR-0232 §1-§3, SPEC §2.3, §2.4, RETRY-17, RETRY-20).

`ClusterRuntime` wraps a `ClusterStore` with a `TransactionClock` (default: the database's
`statement_timestamp()`, `runners.cluster.clock`):

- `execute(command)` runs one command in one transaction; the time is read in the
  transaction after the rows are locked. A serialization failure or a deadlock rolls the
  whole transaction back and is retried, at most `max_attempts` times in all; after that it
  surfaces as `TransientConflictExhausted`, a typed error with a stable code, never as
  success and never as a half-applied transaction.
- `lost_retry_page(limit, new_attempt_id)`, `runtime_recovery_page(limit, evidence)` and
  `cancel_convergence_page(limit)` (§1.9, Appendix D-6, E-1) read
  the time once (P-5) and run one bounded page with the cluster semantics: the first failing
  candidate stops the page closed (RETRY-17, §2.3 step 4). A transient conflict inside a page
  is not retried: the page fails closed and the next cycle starts over from the source.

No domain rule lives here (ARCHITECTURE rule 1): selection is the store's SQL, decisions are
the kernel's, the page loops are `runners.passes`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from psycopg import errors

from kernel import (
    CANDIDATE_ERROR,
    CandidateError,
    Command,
    ConvergeCancel,
    ConvergencePageResult,
    LostRetryPageResult,
    Outcome,
    check_limit,
    classify_convergence,
    stops_convergence_page,
)
from kernel.specs import Code
from runners.cluster.clock import DatabaseClock, TransactionClock
from runners.cluster.store import ClusterStore, ClusterTransaction
from runners.engine import StorageTransaction, execute, execute_observed
from runners.passes import EvidencePort, RecoveryPageResult, lost_retry_page, runtime_recovery_page

#: Failures after which the same transaction, started again, may well succeed.
TRANSIENT_ERRORS: Final = (errors.SerializationFailure, errors.DeadlockDetected)

#: Default number of tries of one command transaction (the first one included).
DEFAULT_MAX_ATTEMPTS: Final = 3


class TransientConflictExhausted(Exception):
    """Every try of one command's transaction ended in a serialization failure or a deadlock;
    each rolled back. The caller sees a stable code and the number of tries, never the
    command's arguments (tokens stay out of messages, S-1)."""

    code: Final = "STORAGE_TRANSIENT_CONFLICT"

    def __init__(self, command: str, attempts: int, last: str) -> None:
        super().__init__(f"{self.code}: {command} rolled back {attempts} times ({last})")
        self.command = command
        self.attempts = attempts
        self.last = last


class CancelConvergenceUnavailable(Exception):
    """Cluster: a convergence candidate failed (a storage, lock or persistence error, or a
    refusal the kernel does not call a race), so the page stopped closed before later
    candidates and the cycle ends there (D-6 with E-5's rule). Carries the stable code and
    the outcomes so far, never exception text (S-1)."""

    code = Code.CANCEL_CONVERGENCE_UNAVAILABLE

    def __init__(self, partial: ConvergencePageResult) -> None:
        super().__init__(f"{self.code}: page stopped after {partial.scanned} candidates")
        self.partial = partial


class ClusterRuntime:
    """Commands and pages of one replica on a `ClusterStore`, at database time by default."""

    def __init__(
        self,
        store: ClusterStore,
        *,
        clock: TransactionClock | None = None,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self.store = store
        self.clock: TransactionClock = DatabaseClock() if clock is None else clock
        self.max_attempts = max_attempts
        #: Transactions rolled back by a transient conflict and tried again (observability).
        self.transient_retries = 0

    def now_ms(self) -> int:
        """One observation time (for a page), read on a connection of the store."""
        with self.store.connection() as conn:
            return self.clock.now_ms(conn)

    def _observe(self, tx: StorageTransaction) -> int:
        assert isinstance(tx, ClusterTransaction)
        return self.clock.now_ms(tx.connection)

    def execute(self, command: Command) -> Outcome:
        """One command in one transaction at the clock's time, with the bounded retry."""
        last = ""
        for attempt in range(1, self.max_attempts + 1):
            try:
                return execute_observed(self.store, command, self._observe)
            except TRANSIENT_ERRORS as exc:
                last = type(exc).__name__
                if attempt < self.max_attempts:
                    self.transient_retries += 1
        raise TransientConflictExhausted(command.name, self.max_attempts, last)

    def lost_retry_page(
        self, limit: int, new_attempt_id: Callable[[str], str]
    ) -> LostRetryPageResult:
        """One cluster lost-retry page at database time; raises `LostRetryUnavailable` when a
        candidate fails (RETRY-17, RETRY-20)."""
        return lost_retry_page(
            self.store, self.store, self.now_ms(), limit, new_attempt_id, fail_closed=True
        )

    def runtime_recovery_page(self, limit: int, evidence: EvidencePort) -> RecoveryPageResult:
        """One page of the §2.3 recovery source at database time; raises
        `RuntimeRecoveryUnavailable` when a candidate fails (REC-13)."""
        return runtime_recovery_page(self.store, self.store, self.now_ms(), limit, evidence)

    def cancel_convergence_page(self, limit: int) -> ConvergencePageResult:
        """One page of `cancel_convergence_candidates` at one database time (P-5): runtime
        ordinary Runs with an intent and no live execution (`lost` and `retry_wait` ones
        included, and E-1's revoked remote Attempts), each `ConvergeCancel` in its own
        transaction (the store's lock order, §1.7, D-7). Whether a candidate stops the page is
        the kernel's `stops_convergence_page` (fail closed, as on every cluster page): then
        `CancelConvergenceUnavailable` is raised and later candidates are not touched."""
        check_limit(limit)
        now = self.now_ms()
        page = self.store.cancel_convergence_candidates(limit)
        done: list[tuple[str, str, str]] = []
        dispositions: list[str] = []
        for candidate in page.items:
            outcome: Outcome | CandidateError
            try:
                outcome = execute(self.store, ConvergeCancel(candidate.run_id), now)
            except Exception:  # storage, lock or persistence failure of this candidate
                outcome = CANDIDATE_ERROR
            if stops_convergence_page(outcome, fail_closed=True):  # the kernel says (E-5)
                raise CancelConvergenceUnavailable(
                    ConvergencePageResult(tuple(done), tuple(dispositions), page.has_more)
                )
            assert not isinstance(outcome, CandidateError)  # a fail-closed page stopped above
            done.append((candidate.run_id, outcome.kind.value, outcome.code.value))
            dispositions.append(classify_convergence(outcome))
        return ConvergencePageResult(tuple(done), tuple(dispositions), page.has_more)
