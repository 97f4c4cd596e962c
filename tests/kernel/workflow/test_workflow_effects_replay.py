"""The effects of every applied Workflow transition reproduce its aggregate (SPEC §4.4, I-W4: a
runner persists exactly `WorkflowApplied.effects`, so what it stores must be what the kernel
decided), as a light property over random command sequences; the full model is
`model_tests`'.

Each step draws a command from the exploration's menu for the current state
(`enumerate_workflow_commands`: every command type with the arguments that state offers) and a
clock step (on, the same millisecond, or back). Refusals write nothing, so only applied steps
move the state.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kernel.effects import AppendEvent
from kernel.workflow import (
    InsertStepRun,
    RequestWorkflowCancel,
    UpdateStepRun,
    WorkflowAggregate,
    WorkflowApplied,
    apply_workflow,
    apply_workflow_effects,
    check_workflow_invariants,
)
from tests.support.workflow_explore import START_MS, enumerate_workflow_commands

_CLOCK = st.sampled_from((1, 1, 1, 0, -1, 250))


@settings(max_examples=60)
@given(st.data())
def test_applying_the_effects_reproduces_every_applied_aggregate(data: st.DataObject) -> None:
    """For every applied step: `apply_workflow_effects(before, effects)` equals the returned
    aggregate, the aggregate keeps I-W1..I-W6, the Events continue `Run.event_seq`, and a
    StepRun row is written iff it changed (one `UpdateStepRun` per changed StepRun)."""
    wf: WorkflowAggregate | None = None
    now = START_MS
    # A cancellation request ends a sequence's interesting part: allow it only from a drawn step.
    cancel_from = data.draw(st.integers(0, 40), label="cancel from")
    for index in range(data.draw(st.integers(1, 30), label="length")):
        menu = [
            c
            for c in enumerate_workflow_commands(wf)
            if index >= cancel_from or not isinstance(c, RequestWorkflowCancel)
        ]
        # Half the draws pick among the commands that apply here, so sequences get deep.
        if data.draw(st.booleans(), label="progress"):
            at = now + 1
            moving = [c for c in menu if isinstance(apply_workflow(wf, c, at), WorkflowApplied)]
            menu = moving or menu
        else:
            at = now + data.draw(_CLOCK, label="clock step")
        command = data.draw(st.sampled_from(menu), label="command")
        outcome = apply_workflow(wf, command, at)
        if not isinstance(outcome, WorkflowApplied):
            continue
        after = outcome.aggregate
        assert apply_workflow_effects(wf, outcome.effects) == after
        assert check_workflow_invariants(after) == []
        first_seq = 1 if wf is None else wf.run.event_seq + 1
        seqs = [e.event.seq for e in outcome.effects if isinstance(e, AppendEvent)]
        assert seqs == list(range(first_seq, first_seq + len(seqs)))
        before_steps = {s.step_run_id: s for s in wf.step_runs} if wf is not None else {}
        changed = {s.step_run_id for s in after.step_runs if before_steps.get(s.step_run_id) != s}
        written = {
            e.row.step_run_id
            for e in outcome.effects
            if isinstance(e, InsertStepRun | UpdateStepRun)
        }
        assert written == changed
        wf, now = after, at
