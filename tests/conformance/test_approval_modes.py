"""Guard mode, kill mode and the lock probe cover the approval domain's write paths on the edge
runner (SPEC §5, issue 19 item 3, decision AA-D1; V-1, D-2).

An approval command is one `execute_action` transaction: every (command, outcome code) pair
the approval corpus applies is a write path of `conformance.run.walk`, probed with a stale
variant of every guard (an `UpdateAction` one version behind, each insert twice, and a start's
Run admission effects) that the store's own statements must refuse; SIGKILLed at every
statement boundary of a real SQLite file, which must then hold exactly the before- or the
after-state (a kill between the start barrier and the start never leaves an action started
without its Run, nor a Run without its action ended); and held after its load while a second
connection's `BEGIN IMMEDIATE` must block. `qlk conform --traces` over the approval corpus
passes on edge and reports every trace not applicable, never diverged, on the cluster runner.
"""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.run.adapter import ReferenceAdapter
from conformance.run.corpus import APPROVAL_CORPUS, read_trace, trace_paths
from conformance.run.edge import EdgeAdapter, make_edge_adapter
from conformance.run.guards import probe_every_write, stale_variants
from conformance.run.kill_edge import kill_at, kill_every_write
from conformance.run.locks import lock_every_write_edge
from conformance.run.replay import apply_step
from conformance.run.trace import decode_trace_command
from kernel import Rejected
from kernel.approved_action import (
    ActionEvent,
    AppendActionEvent,
    ApprovedAction,
    InsertAction,
    UpdateAction,
)
from kernel.approved_action.trace_codec import ACTION_COMMANDS_BY_NAME
from kernel.commands import AdmitRun
from kernel.specs.approved_action import ActionEventType, ActionStatus
from kernel.specs.states import Actor
from runners.edge.store import EdgeStore
from runners.engine import StaleWrite

#: The approval (command, outcome code) pairs the corpus applies without a fault: every row of
#: `ACTION_TABLE` the domain can take (the Run's own `admit_run` is a run-corpus path).
APPROVAL_PATHS = frozenset(
    {
        ("request_approval", "requested"),
        ("approve_action", "approved"),
        ("deny_action", "denied"),
        ("claim_action", "claimed"),
        ("start_action", "started"),
        ("start_action", "verified_started"),
        ("start_action", "evidence_contradicted"),
        ("resolve_action", "verified_not_started"),
        ("resolve_action", "verified_started"),
        ("resolve_action", "evidence_contradicted"),
    }
)


def _approval(pairs: list[tuple[str, str]]) -> set[tuple[str, str]]:
    return {p for p in pairs if p[0] in ACTION_COMMANDS_BY_NAME}


def test_guard_mode_probes_every_approval_write_and_the_edge_store_refuses_each() -> None:
    report = probe_every_write(make_edge_adapter, APPROVAL_CORPUS)
    assert not report.not_applicable
    assert report.failures == []
    assert _approval([(w.command, w.code) for w in report.writes]) == APPROVAL_PATHS
    # Each approval write has a version probe and duplicate-insert probes; a start carries the
    # Run admission's inserts as well.
    by_path = {(w.command, w.code): w.probes for w in report.writes}
    assert by_path[("request_approval", "requested")] == 2  # the action and its Event, twice
    assert by_path[("claim_action", "claimed")] == 2  # an older version, the Event twice
    assert by_path[("start_action", "started")] > by_path[("claim_action", "claimed")]


def test_guard_mode_on_the_reference_store_agrees() -> None:
    report = probe_every_write(ReferenceAdapter, APPROVAL_CORPUS)
    assert report.failures == []
    assert _approval([(w.command, w.code) for w in report.writes]) == APPROVAL_PATHS


def _action(version: int) -> ApprovedAction:
    admission = AdmitRun("run-1", "run-1-a1", "project", "task", 1, "local.posix")
    return ApprovedAction(
        "apr-1", admission, ActionStatus.PENDING, version, version, "alice", 1_000, 1_000
    )


def test_the_stale_variants_of_the_approval_effects() -> None:
    update = UpdateAction(_action(3), expected_version=2)
    assert list(stale_variants(update)) == [
        ("version", (dataclasses.replace(update, expected_version=1),))
    ]
    insert = InsertAction(_action(1))
    assert list(stale_variants(insert)) == [("duplicate", (insert, insert))]
    event = AppendActionEvent(
        ActionEvent("apr-1", 1, ActionEventType.REQUESTED, Actor.USER, 1_000, by="alice")
    )
    assert list(stale_variants(event)) == [("duplicate", (event, event))]


def test_the_edge_store_refuses_a_stale_update_action_by_its_where_clause(tmp_path: Path) -> None:
    """The guard at the resource, without the suite: an `UpdateAction` one version behind
    changes no row and is `StaleWrite`, the transaction rolls back, the row is unchanged."""
    store = EdgeStore(tmp_path / "edge.sqlite3")
    try:
        with store.transaction() as tx:
            tx.execute(InsertAction(_action(1)))
        moved = dataclasses.replace(_action(2), status=ActionStatus.DENIED, finished_at_ms=1_001)
        moved = dataclasses.replace(moved, decided_by="bob", decided_at_ms=1_001)
        with pytest.raises(StaleWrite), store.transaction() as tx:
            tx.execute(UpdateAction(moved, expected_version=0))
        found = store.action("apr-1")
        assert found is not None
        assert (found[0].status, found[0].version) == (ActionStatus.PENDING, 1)
        with store.transaction() as tx:
            tx.execute(UpdateAction(moved, expected_version=1))
        found = store.action("apr-1")
        assert found is not None
        assert (found[0].status, found[0].version) == (ActionStatus.DENIED, 2)
    finally:
        store.close()


def test_kill_mode_leaves_the_before_or_the_after_state_at_every_statement() -> None:
    results = kill_every_write(APPROVAL_CORPUS)
    failures = [line for r in results for line in r.failures]
    assert failures == []
    paths = {(r.path.command.name, r.path.code): r for r in results}
    assert _approval(list(paths)) == APPROVAL_PATHS
    for key in APPROVAL_PATHS:
        result = paths[key]
        # BEGIN IMMEDIATE, the loads, one statement per effect, COMMIT: each a boundary.
        assert result.statements >= 4, key
        assert result.kills == result.statements + 1, key
    # The start admits the Run in the same transaction: more boundaries than the claim's.
    started = paths[("start_action", "started")]
    assert started.statements > paths[("claim_action", "claimed")].statements


def test_the_lock_probe_blocks_a_second_writer_on_every_approval_write() -> None:
    report = lock_every_write_edge(APPROVAL_CORPUS)
    assert report.failures == []
    assert _approval([(r.path.command.name, r.path.code) for r in report.results]) == (
        APPROVAL_PATHS
    )
    blocked = {(r.path.command.name, r.path.code): r.contenders for r in report.results}
    # A request loads no action (like admit_run, nothing to hold yet); every other write does.
    assert blocked[("request_approval", "requested")] == 0
    assert all(blocked[key] == 1 for key in APPROVAL_PATHS - {("request_approval", "requested")})


def _conform(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["conform", "--quiet", "--traces", str(APPROVAL_CORPUS), *args], out=out)
    return code, out.getvalue()


def test_qlk_conform_over_the_approval_corpus_passes_on_edge() -> None:
    code, text = _conform()
    assert code == 0, text
    assert text.rstrip().splitlines()[-1] == "verdict: PASS"
    total = len(trace_paths(APPROVAL_CORPUS))
    assert re.search(rf"passed\s+\|\s+{total}\s+\|", text), text
    # The approval paths and the Run's `admit_run` (the evidence trace admits Runs directly).
    paths = len(APPROVAL_PATHS) + 1
    for mode in ("guard mode", "kill mode", "lock probe"):
        assert re.search(rf"^{mode}: {paths} write paths", text, re.M), text


def test_an_approval_trace_steps_count_is_replayed_in_full() -> None:
    """Sanity for the figures above: the corpus has steps, faults and pages to replay."""
    steps = [s for p in trace_paths(APPROVAL_CORPUS) for s in read_trace(p).steps]
    assert sum(1 for s in steps if s.fault is not None) >= 40
    assert sum(1 for s in steps if s.page is not None) >= 20


#: The traces the kill-at-every-step check walks: the whole dispatch path, and the crash window.
KILLED_TRACES = (
    "AA-D1-request-approve-claim-start-admits-the-run-once.jsonl",
    "AA-D1-crash-after-the-barrier-resolves-failed-never-starts.jsonl",
)


@pytest.mark.parametrize("name", KILLED_TRACES)
@pytest.mark.parametrize("committed", [False, True], ids=["before-commit", "after-commit"])
def test_a_kill_at_any_step_then_reopen_and_redelivery_ends_in_the_no_crash_state(
    name: str, committed: bool, tmp_path: Path
) -> None:
    """For every unfaulted command step of the trace: the edge runner is SIGKILLed in a child
    process just before that step's `COMMIT` (or just after it committed, its response lost),
    the file is reopened, the same command is redelivered, and the rest of the trace replays;
    the final state equals the trace's no-crash final state (no second admission, no Event
    twice), and the redelivery answers what the trace expects or, after a commit, never
    applies a second time."""
    trace = read_trace(APPROVAL_CORPUS / name)
    final = trace.steps[-1].expect.projection
    targets = [i for i, s in enumerate(trace.steps) if s.command is not None and s.fault is None]
    assert len(targets) >= 5
    for index in targets:
        step = trace.steps[index]
        adapter = EdgeAdapter(tmp_path / f"{index}-{committed}.sqlite3")
        try:
            for earlier in trace.steps[:index]:
                apply_step(adapter, earlier)
            command = decode_trace_command(step.command)  # type: ignore[arg-type]
            assert not isinstance(command, Rejected)
            adapter.store.close()
            assert kill_at(adapter.store.path, command, step.observed_at_ms, committed=committed)
            adapter.reopen()
            again = apply_step(adapter, step)
            if not committed:
                assert (again.kind, again.code) == (step.expect.kind, step.expect.code)
            elif step.expect.kind == "applied":
                assert again.kind in {"replayed", "raced"}, (index, again)
            assert adapter.project() == step.expect.projection, index
            for later in trace.steps[index + 1 :]:
                apply_step(adapter, later)
            assert adapter.project() == final, index
        finally:
            adapter.close()
