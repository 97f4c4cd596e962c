"""The inbox lifecycle as data (SPEC §3.10, ADR-0021 §5): states, edges, the recovery trigger.

That the real lifecycle (`runners/worker/inbox_lifecycle.py`) takes exactly these edges and
refuses every other pair is walked in `tests/test_state_tables.py`.
"""

from __future__ import annotations

import pytest

from kernel.specs.codes import Code
from kernel.specs.inbox_lifecycle import (
    HOLDS_OWNERSHIP,
    INBOX_TABLE,
    RECOVERY_CLASSES,
    TERMINAL_INBOX_STATES,
    InboxState,
    InboxTrigger,
)
from kernel.specs.journal import AUDIT_CLASSIFICATION, AuditClass
from kernel.worker.auditor import AuditResult, entry
from kernel.worker.supervisor import plan_recovery


def _reachable(start: InboxState) -> set[InboxState]:
    seen = {start}
    frontier = [start]
    while frontier:
        state = frontier.pop()
        for edge in INBOX_TABLE.edges():
            target = edge.target
            if edge.source is state and target is not None and target not in seen:
                seen.add(target)
                frontier.append(target)
    return seen


def test_the_nine_states_of_the_spec() -> None:
    """§3.10 [decision]: exactly these states, in this order."""
    assert [s.value for s in InboxState] == [
        "inert",
        "acquiring",
        "auditing",
        "recovering",
        "reauditing",
        "holding",
        "stopping",
        "stopped",
        "refused",
    ]


@pytest.mark.spec("INBOX-28")
def test_the_transition_table() -> None:
    """The whole legal surface, edge by edge: acquire, audit, [recovery, re-audit], hold, and a
    refusal from every step after acquiring."""
    assert {(e.source, e.trigger, e.target) for e in INBOX_TABLE.edges()} == {
        (InboxState.INERT, InboxTrigger.START, InboxState.ACQUIRING),
        (InboxState.INERT, InboxTrigger.STOP, InboxState.STOPPED),
        (InboxState.ACQUIRING, InboxTrigger.ACQUIRED, InboxState.AUDITING),
        (InboxState.ACQUIRING, InboxTrigger.ACQUIRE_FAILED, InboxState.REFUSED),
        (InboxState.AUDITING, InboxTrigger.RECOVERY_NEEDED, InboxState.RECOVERING),
        (InboxState.AUDITING, InboxTrigger.AUDIT_COMPLETE, InboxState.HOLDING),
        (InboxState.AUDITING, InboxTrigger.REFUSED, InboxState.REFUSED),
        (InboxState.RECOVERING, InboxTrigger.RECOVERED, InboxState.REAUDITING),
        (InboxState.RECOVERING, InboxTrigger.REFUSED, InboxState.REFUSED),
        (InboxState.REAUDITING, InboxTrigger.AUDIT_COMPLETE, InboxState.HOLDING),
        (InboxState.REAUDITING, InboxTrigger.REFUSED, InboxState.REFUSED),
        (InboxState.HOLDING, InboxTrigger.STOP, InboxState.STOPPING),
        (InboxState.STOPPING, InboxTrigger.RELEASED, InboxState.STOPPED),
    }


@pytest.mark.spec("INBOX-28")
def test_the_order_is_acquire_audit_recovery_reaudit_hold() -> None:
    """Auditing is entered only after acquiring; recovery only from the first audit (at most
    once); re-audit only after recovery; holding only from a complete audit or re-audit."""
    sources = {
        target: {e.source for e in INBOX_TABLE.edges() if e.target is target}
        for target in InboxState
    }
    assert sources[InboxState.ACQUIRING] == {InboxState.INERT}
    assert sources[InboxState.AUDITING] == {InboxState.ACQUIRING}
    assert sources[InboxState.RECOVERING] == {InboxState.AUDITING}
    assert sources[InboxState.REAUDITING] == {InboxState.RECOVERING}
    assert sources[InboxState.HOLDING] == {InboxState.AUDITING, InboxState.REAUDITING}
    assert sources[InboxState.STOPPING] == {InboxState.HOLDING}
    # Every refusal after acquiring happens while ownership is held: the runner must release
    # first. Only a failed acquire refuses without holding anything.
    refusing = {e.source for e in INBOX_TABLE.edges() if e.target is InboxState.REFUSED}
    assert refusing == {InboxState.ACQUIRING} | (
        HOLDS_OWNERSHIP - {InboxState.HOLDING, InboxState.STOPPING}
    )


def test_terminal_states_have_no_way_out_and_every_state_is_reachable() -> None:
    """`stopped` and `refused` are absorbing (single use); nothing is dead code."""
    assert {InboxState.STOPPED, InboxState.REFUSED} == TERMINAL_INBOX_STATES
    assert not [e for e in INBOX_TABLE.edges() if e.source in TERMINAL_INBOX_STATES]
    assert _reachable(InboxState.INERT) == set(InboxState)
    for state in set(InboxState) - TERMINAL_INBOX_STATES:
        assert _reachable(state) & TERMINAL_INBOX_STATES, state


def test_recovery_runs_for_exactly_the_classes_the_supervisor_acts_on() -> None:
    """§3.10 [decision] and §3.13: an injected recovery runs for `settled_completion`,
    `launch_reconciliation` and `execution_reconciliation`, the classes for which the kernel's
    supervisor plans an action; `no_local_execution` and `settled_start_failure` never start
    one."""
    assert {
        AuditClass.SETTLED_COMPLETION,
        AuditClass.LAUNCH_RECONCILIATION,
        AuditClass.EXECUTION_RECONCILIATION,
    } == RECOVERY_CLASSES
    for state, cls in AUDIT_CLASSIFICATION.items():
        result = AuditResult((entry("0" * 64, "a1", state),), {}, Code.READY)
        plan = plan_recovery(result, 64)
        assert isinstance(plan, tuple)
        assert (len(plan) == 1) == (cls in RECOVERY_CLASSES), state
