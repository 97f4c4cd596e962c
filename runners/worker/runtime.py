"""One Worker runtime, assembled (SPEC §3; issue 6 item 5): what a deployment embeds.

    runtime = WorkerRuntime(journal, client, executor, receipts, session=..., clock=...)
    status = runtime.start()         # acquire, audit, startup recovery, re-audit, hold (§3.10)
    result = runtime.deliver(offer)  # the receiver pipeline (§3.5), only while holding
    runtime.tick()                   # the lease lifecycle's timer body (§3.15)
    runtime.poll_completions()       # one page: receipts -> completions (§3.11, §3.12)
    runtime.retention(cursor)        # one page of terminal retention (§3.14)
    runtime.stop()

The parts are the modules of `runners.worker`; this class only wires them to one journal, one
control-plane client, one executor and one receipt store, with the supervisor as the inbox
lifecycle's injected startup recovery and the receipt cleanup of `runners.worker.retention`
as its `settled_completion` action. Startup recovery and the completion poll read the control
plane (E-3, `Coordinator.read_view`) for a record with completion evidence, so a record whose
completion the control plane already accepted converges by exact replay after a restart as a
new session or after lease expiry (INBOX-35). It starts no thread unless `start_timer()` is
called.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kernel import WorkerSession
from kernel.specs import (
    ACCEPTS_DELIVERIES,
    LEASE_DURATION_DEFAULT_MS,
    WORKER_COMPLETION_POLL_PAGE,
    Code,
    Paging,
    Profile,
    budget_for,
)
from kernel.worker import (
    RELEASES_LEASE,
    AuditResult,
    LeaseLossReason,
    Offer,
    OfferLease,
    PollAction,
    poll_action,
    start_failure_replays,
)
from runners.worker.coordinator import Coordinator, CoordinatorResult
from runners.worker.inbox_lifecycle import (
    InboxStatus,
    RecoveryReport,
    WorkerExecutionOfferInboxLifecycle,
)
from runners.worker.journal.engine import JournalEngine
from runners.worker.journal.port import JournalError, JournalStore, OwnedJournal
from runners.worker.lease_lifecycle import TickResult, WorkerLeaseLifecycle
from runners.worker.lease_loss import LeaseLossCoordinator
from runners.worker.ports import (
    Clock,
    Controller,
    ControlPlaneClient,
    ExecutionContextFactory,
    Executor,
    Inspector,
)
from runners.worker.posix.adapters import (
    PosixController,
    PosixInspector,
    ReceiptEvidence,
    TokenContextFactory,
)
from runners.worker.posix.receipts import CompletionReceiptStore, ReceiptAuthenticator
from runners.worker.receiver import DeliveryResult, Receiver, ResultKind
from runners.worker.reconciler import DEFAULT_GRACE_MS, Reconciler
from runners.worker.retention import RetentionResult, TerminalRetention, cleanup_settled_receipt
from runners.worker.supervisor import DEFAULT_ACTION_BUDGET, StartupSupervisor


@dataclass(frozen=True, slots=True)
class CompletionPoll:
    """One `poll_completions` page: what was done per record, and the next cursor."""

    results: tuple[CoordinatorResult, ...]
    cursor: str | None
    has_more: bool
    fail_start_replays: tuple[DeliveryResult, ...] = ()


class WorkerRuntime:
    """See the module docstring."""

    def __init__(
        self,
        journal: OwnedJournal,
        client: ControlPlaneClient,
        executor: Executor,
        receipts: CompletionReceiptStore,
        *,
        session: Callable[[], WorkerSession],
        clock: Clock,
        audit_budget: Paging | None = None,
        factory: ExecutionContextFactory | None = None,
        inspector: Inspector | None = None,
        controller: Controller | None = None,
        lease_duration_ms: int = LEASE_DURATION_DEFAULT_MS,
        recovery_budget: int = DEFAULT_ACTION_BUDGET,
        grace_ms: int = DEFAULT_GRACE_MS,
        retention_ms: int | None = None,
    ) -> None:
        self.journal = journal
        self.clock = clock
        self._session = session
        self._receipts = receipts
        self._evidence = ReceiptEvidence(receipts, ReceiptAuthenticator())
        self.lease_loss = LeaseLossCoordinator(
            journal, controller if controller is not None else PosixController(), clock
        )
        self.lifecycle = WorkerLeaseLifecycle(
            client, duration_ms=lease_duration_ms, on_lost=self._on_lost, clock=clock
        )
        self.receiver = Receiver(
            journal,
            runtime=session,
            client=client,
            lifecycle=self.lifecycle,
            factory=factory if factory is not None else TokenContextFactory(),
            executor=executor,
            clock=clock,
            capacity=journal.capacity,
        )
        self.reconciler = Reconciler(
            self._evidence,
            inspector if inspector is not None else PosixInspector(),
            grace_ms=grace_ms,
        )
        self.coordinator = Coordinator(journal, client, self._evidence, clock)
        self.supervisor = StartupSupervisor(
            journal,
            self.reconciler,
            self.coordinator,
            self._clean_receipt,
            runtime=session,
            clock=clock,
            budget=recovery_budget,
            view=self.coordinator.read_view,  # §3.11's view through the client's read (E-3)
        )
        budget = (
            audit_budget if audit_budget is not None else _default_audit_budget(journal.capacity)
        )
        self.inbox = WorkerExecutionOfferInboxLifecycle(
            journal, budget, recovery=self._startup_recovery
        )
        self._retention = (
            None if retention_ms is None else TerminalRetention(journal, receipts, retention_ms)
        )

    def __repr__(self) -> str:
        return f"WorkerRuntime(state={self.inbox.state})"

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> InboxStatus:
        """§3.10: acquire, audit, startup recovery (the supervisor), re-audit, hold; then the
        restart row of §3.7 for `start_failed` (`replay_start_failures`)."""
        status = self.inbox.start()
        if status.state in ACCEPTS_DELIVERIES:
            self.replay_start_failures()
        return status

    def replay_start_failures(self) -> tuple[DeliveryResult, ...]:
        """`replay_start_failures` over the startup audit the inbox holds."""
        audit = self.inbox.status.audit
        return () if audit is None else replay_start_failures(audit, self.receiver)

    def stop(self) -> InboxStatus:
        self.lifecycle.stop()
        return self.inbox.stop()

    def start_timer(self) -> None:
        """The lease lifecycle's one timer (a daemon thread)."""
        self.lifecycle.start()

    # -- work ------------------------------------------------------------------------------------
    def deliver(self, offer: object) -> DeliveryResult:
        """§3.5, only while the inbox holds the journal (the transport starts after startup)."""
        if not isinstance(offer, Offer):
            return DeliveryResult("", ResultKind.REJECTED, Code.OFFER_INVALID)
        if self.inbox.state not in ACCEPTS_DELIVERIES:
            return DeliveryResult(offer.offer_id, ResultKind.REJECTED, Code.JOURNAL_NOT_OWNED)
        return self.receiver.deliver(offer)

    def tick(self, now_ms: int | None = None) -> TickResult:
        return self.lifecycle.tick(self.clock() if now_ms is None else now_ms)

    def poll_completions(
        self, cursor: str | None = None, limit: int = WORKER_COMPLETION_POLL_PAGE
    ) -> CompletionPoll:
        """One page of the journal (`poll_page`): receipts to completions (§3.11, §3.12) and
        `fail_start` replays (§3.7)."""
        return poll_page(
            self.journal,
            self.receiver,
            self.lifecycle,
            self.supervisor,
            now_ms=self.clock(),
            cursor=cursor,
            limit=limit,
        )

    def retention(self, cursor: str | None = None) -> RetentionResult:
        if self._retention is None:
            raise ValueError("retention is not configured (retention_ms has no default, §3.14)")
        return self._retention.run(cursor, self.clock())

    # -- wiring ------------------------------------------------------------------------------------
    def _on_lost(self, snapshot: OfferLease, reason: LeaseLossReason) -> None:
        self.lease_loss.on_lost(snapshot, reason)

    def _clean_receipt(self, offer_id: str) -> tuple[bool, Code | None]:
        result = cleanup_settled_receipt(self.journal, self._receipts, offer_id)
        code = result.code if isinstance(result.code, Code) else None
        return result.settled, code

    def _startup_recovery(self, audit: AuditResult) -> RecoveryReport:
        outcome = self.supervisor.run(audit)
        return RecoveryReport(
            refused=outcome.refused,
            status=outcome.status,
            actions=len(outcome.items),
            failed_items=outcome.failed_items,
        )


def _default_audit_budget(capacity: int) -> Paging:
    """U-2: the `edge` budget row (16 x 4) when it covers the journal's capacity, else the
    `worker` row (64 x 16, decision B-49): a budget smaller than the capacity is rejected by
    the auditor, so a larger journal needs the larger one."""
    edge = budget_for(Profile.EDGE).startup_auditor
    worker = budget_for(Profile.WORKER).startup_auditor
    assert edge is not None
    assert worker is not None
    return edge if edge.max_items >= capacity else worker


# -- the steps, as functions (the Worker model drives exactly these, model_tests/worker_machine)
def poll_page(
    journal: JournalStore,
    receiver: Receiver,
    lifecycle: WorkerLeaseLifecycle,
    supervisor: StartupSupervisor,
    *,
    now_ms: int,
    cursor: str | None = None,
    limit: int = WORKER_COMPLETION_POLL_PAGE,
) -> CompletionPoll:
    """One page of the journal, each record as the kernel's `poll_action` says (E-6): a record
    that may own a local execution gets the lease lifecycle's newer version merged in first (the
    §3.12 decision: a completion uses the journal's version, so the submission and any replay
    after a crash are exact), then the Reconciler and the Coordinator (`reconcile_one`); one
    whose lease the outcome settles is untracked (nothing left to renew). A record whose §3.7
    row is "replay `fail_start`" replays it.

    :raises RuntimeError: the page could not be listed (the journal's code, never its text).
    """
    try:
        page = journal.list(cursor, limit)
    except JournalError as exc:
        raise RuntimeError(f"journal unavailable: {exc.code}") from None
    engine = JournalEngine(journal, lambda: now_ms)
    results: list[CoordinatorResult] = []
    replays: list[DeliveryResult] = []
    for record in page.records:
        offer_id = record.offer_id
        step = poll_action(
            record, in_flight=receiver.in_flight(offer_id), held=lifecycle.current(offer_id)
        )
        if step.merge is not None:
            engine.write(record, step.merge)  # a failure leaves the older version: still exact
        if step.action is PollAction.RECONCILE:
            result = supervisor.reconcile_one(offer_id, now_ms)
            if result.outcome in RELEASES_LEASE:
                lifecycle.untrack(offer_id)
            results.append(result)
        elif step.action is PollAction.REPLAY_FAIL_START:
            replayed = receiver.replay_fail_start(offer_id)
            if replayed is not None:
                replays.append(replayed)
    return CompletionPoll(tuple(results), page.cursor, page.has_more, tuple(replays))


def replay_start_failures(audit: AuditResult, receiver: Receiver) -> tuple[DeliveryResult, ...]:
    """§3.7 on restart: every audited record whose row is "replay `fail_start` only"
    (`kernel.worker.supervisor.start_failure_replays`) replays it
    (`Receiver.replay_fail_start`). Without it a Worker killed after the control plane accepted
    the failure and before `start_failure_acknowledged` keeps the record non-final forever: T5
    released the lease, so no redelivery can come, and the startup supervisor has no action for
    `no_local_execution` (found by the kill matrix). Bounded by the audit's budget."""
    results: list[DeliveryResult] = []
    for offer_id in start_failure_replays(audit):
        result = receiver.replay_fail_start(offer_id)
        if result is not None:
            results.append(result)
    return tuple(results)
