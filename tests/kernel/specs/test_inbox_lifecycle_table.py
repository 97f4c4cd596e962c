"""The inbox lifecycle as data (SPEC §3.10, ADR-0021 §5): states, edges, the recovery trigger."""

from __future__ import annotations

import itertools

import pytest

from kernel.specs.codes import Code
from kernel.specs.inbox_lifecycle import (
    HOLDS_OWNERSHIP,
    INBOX_TRANSITIONS,
    RECOVERY_CLASSES,
    TERMINAL_INBOX_STATES,
    InboxState,
    InboxTrigger,
    next_inbox_state,
)
from kernel.specs.journal import AUDIT_CLASSIFICATION, AuditClass
from kernel.worker.auditor import AuditResult, entry
from kernel.worker.supervisor import plan_recovery

S, T = InboxState, InboxTrigger


def _reachable(start: InboxState) -> set[InboxState]:
    seen = {start}
    frontier = [start]
    while frontier:
        state = frontier.pop()
        for (source, _), target in INBOX_TRANSITIONS.items():
            if source is state and target not in seen:
                seen.add(target)
                frontier.append(target)
    return seen


def test_the_nine_states_of_the_spec() -> None:
    """§3.10 [decision]: exactly these states, in this order."""
    assert [s.value for s in S] == [
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
    assert dict(INBOX_TRANSITIONS) == {
        (S.INERT, T.START): S.ACQUIRING,
        (S.INERT, T.STOP): S.STOPPED,
        (S.ACQUIRING, T.ACQUIRED): S.AUDITING,
        (S.ACQUIRING, T.ACQUIRE_FAILED): S.REFUSED,
        (S.AUDITING, T.RECOVERY_NEEDED): S.RECOVERING,
        (S.AUDITING, T.AUDIT_COMPLETE): S.HOLDING,
        (S.AUDITING, T.REFUSED): S.REFUSED,
        (S.RECOVERING, T.RECOVERED): S.REAUDITING,
        (S.RECOVERING, T.REFUSED): S.REFUSED,
        (S.REAUDITING, T.AUDIT_COMPLETE): S.HOLDING,
        (S.REAUDITING, T.REFUSED): S.REFUSED,
        (S.HOLDING, T.STOP): S.STOPPING,
        (S.STOPPING, T.RELEASED): S.STOPPED,
    }


@pytest.mark.spec("INBOX-28")
def test_the_order_is_acquire_audit_recovery_reaudit_hold() -> None:
    """Auditing is entered only after acquiring; recovery only from the first audit (at most
    once); re-audit only after recovery; holding only from a complete audit or re-audit."""
    sources = {
        target: {s for (s, _), t in INBOX_TRANSITIONS.items() if t is target} for target in S
    }
    assert sources[S.ACQUIRING] == {S.INERT}
    assert sources[S.AUDITING] == {S.ACQUIRING}
    assert sources[S.RECOVERING] == {S.AUDITING}
    assert sources[S.REAUDITING] == {S.RECOVERING}
    assert sources[S.HOLDING] == {S.AUDITING, S.REAUDITING}
    assert sources[S.STOPPING] == {S.HOLDING}
    # Every refusal after acquiring happens while ownership is held: the runner must release
    # first. Only a failed acquire refuses without holding anything.
    refusing = {s for (s, t), target in INBOX_TRANSITIONS.items() if target is S.REFUSED}
    assert refusing == {S.ACQUIRING} | (HOLDS_OWNERSHIP - {S.HOLDING, S.STOPPING})


def test_terminal_states_have_no_way_out_and_every_state_is_reachable() -> None:
    """`stopped` and `refused` are absorbing (single use); nothing is dead code."""
    assert {S.STOPPED, S.REFUSED} == TERMINAL_INBOX_STATES
    assert not [key for key in INBOX_TRANSITIONS if key[0] in TERMINAL_INBOX_STATES]
    assert _reachable(S.INERT) == set(S)
    for state in set(S) - TERMINAL_INBOX_STATES:
        assert _reachable(state) & TERMINAL_INBOX_STATES, state


def test_next_state_is_total_and_reads_the_table() -> None:
    for state, trigger in itertools.product(S, T):
        assert next_inbox_state(state, trigger) == INBOX_TRANSITIONS.get((state, trigger))


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
