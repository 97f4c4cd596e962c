"""Guard mode reports what the runner did (issue 16 item 3): a runner that raises while a
stale write is probed is reported as raising, with the exception type and where, never counted
as having accepted the stale write."""

from __future__ import annotations

import pytest

from conformance.run.corpus import RUN_CORPUS
from conformance.run.edge import make_edge_adapter
from conformance.run.guards import probe_every_write
from kernel import Effect
from runners.edge.store import EdgeTransaction

TRACE = RUN_CORPUS / "RETRY-08-due-retry-wait-requeued-exactly-once.jsonl"


class RunnerBug(RuntimeError):
    """What a broken adapter raises."""


def test_the_runner_as_shipped_refuses_every_stale_write() -> None:
    report = probe_every_write(make_edge_adapter, paths=[TRACE])
    assert report.probes > 0
    assert (report.accepted, report.raised, report.failures) == ([], [], [])
    assert ", 0 accepted by the runner" in report.summary()


def test_a_runner_that_raises_is_reported_as_raising_not_as_accepting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    original = EdgeTransaction.execute
    calls = {"n": 0}

    def broken(self: EdgeTransaction, effect: Effect) -> None:
        calls["n"] += 1
        if calls["n"] > 3:  # the trace's first steps replay, then every write raises
            raise RunnerBug("a planted data bug")
        original(self, effect)

    monkeypatch.setattr(EdgeTransaction, "execute", broken)
    report = probe_every_write(make_edge_adapter, paths=[TRACE])
    assert report.accepted == []
    assert report.raised
    assert all("raised RunnerBug" in line for line in report.raised)
    assert report.failures  # still a failed check (exit 1), but named for what it is
    summary = report.summary()
    assert ", 0 accepted by the runner" in summary
    assert f", {len(report.raised)} raised (first: " in summary
