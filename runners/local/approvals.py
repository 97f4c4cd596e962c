"""The approval domain's two ports on the edge store (SPEC §5.1, ADR-0036; issue 19, decision
AA-D1): `reconcile_batch` and `dispatch_batch`, which the Approved Action supervisor pages
through (`runners.approved_action`).

Each call reads one page of its due index (one bounded index query, `sql/approved_action.sql`)
and, for each item, runs the kernel's commands through the engine, one transaction each; the
kernel decides everything (`kernel.approved_action.rules`): whether a claim is followed by a
start (`after_claim`), and which counter an outcome adds to (`dispatch_tally`,
`recovery_tally`). One observation time per call (P-5). A storage failure raises: the page, and
so the cycle, fails closed (the supervisor then calls no dispatcher, AA-01).

The dispatcher's two transactions are the at-most-once rule: the claim commits the start
barrier (`starting`) first; the start admits the Run and ends the barrier together. A crash
between them leaves the action `starting`, and only the reconciler touches it again, from the
Run's facts.
"""

from __future__ import annotations

from collections.abc import Callable

from kernel.approved_action import (
    ActionCursor,
    ActionSource,
    ClaimAction,
    DispatchCounters,
    DispatchPage,
    RecoveryCounters,
    RecoveryPage,
    ResolveAction,
    after_claim,
    dispatch_tally,
    recovery_tally,
)
from runners.edge.store import EdgeStore
from runners.engine import execute_action

__all__ = ["EdgeApprovalPorts"]


class EdgeApprovalPorts:
    """`RecoveryPort` and `DispatchPort` of `runners.approved_action` on one `EdgeStore`.

    `between`, when given, is called after each committed claim and before its start (a test
    hook: the kill tests stop a real process there, behind the barrier)."""

    def __init__(
        self,
        store: EdgeStore,
        clock: Callable[[], int],
        *,
        between: Callable[[str], None] | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._between = between

    def reconcile_batch(self, cursor: ActionCursor | None, page_size: int) -> RecoveryPage:
        """One recovery page: resolve each `starting` action from its Run's facts."""
        now = self._clock()
        page = self._store.action_page(ActionSource.RECOVERY, cursor, page_size)
        counters = RecoveryCounters.zero()
        for key in page.keys:
            outcome = execute_action(self._store, ResolveAction(key.action_id), now)
            counters += recovery_tally(outcome)
        return RecoveryPage(counters, page.truncated, page.next_cursor)

    def dispatch_batch(self, cursor: ActionCursor | None, page_size: int) -> DispatchPage:
        """One dispatch page: claim each `approved` action, then start it."""
        now = self._clock()
        page = self._store.action_page(ActionSource.DISPATCH, cursor, page_size)
        counters = DispatchCounters.zero()
        for key in page.keys:
            claim = ClaimAction(key.action_id)
            claimed = execute_action(self._store, claim, now)
            start = after_claim(claim, claimed)
            started = None
            if start is not None:
                if self._between is not None:
                    self._between(key.action_id)
                started = execute_action(self._store, start, now)
            counters += dispatch_tally(claimed, started)
        return DispatchPage(counters, page.truncated, page.next_cursor)
