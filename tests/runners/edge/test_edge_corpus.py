"""The main acceptance test of the edge runner (issue 4): every trace of the committed corpus
replays on a real SQLite file with zero divergences, comparing outcome kind, code, page and the
full projection (read by the backdoor reader) after every step. A trace that needs a capability
the edge runner does not declare is `not_applicable`, never passed; exactly the traces that need
the cluster recovery source or the cluster page semantics are."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from conformance.run.corpus import RUN_CORPUS, read_trace, spec_id_of, trace_paths
from conformance.run.edge import CAPABILITIES, EdgeAdapter, make_edge_adapter
from conformance.run.guards import probe_every_write
from conformance.run.replay import replay
from kernel.specs.properties import PROPERTIES

CLUSTER_ONLY = frozenset({"cluster_recovery", "lost_retry_cluster"})
PATHS = trace_paths()


def _named_header_capabilities(path: Path) -> tuple[str, ...]:
    with path.open(encoding="utf-8") as handle:
        header = json.loads(handle.readline())
    return tuple(header.get("capabilities", ()))


def _param(path: Path) -> object:
    """Named traces that the edge runner can pass cite their SPEC item (the file name starts
    with the property id): passing them on SQLite is that item's CONF evidence."""
    name = str(path.relative_to(RUN_CORPUS))
    item = spec_id_of(name)
    if item is not None:
        caps = set(_named_header_capabilities(path))
        if item in PROPERTIES and caps <= CAPABILITIES:
            return pytest.param(path, id=name, marks=pytest.mark.spec(item))
    return pytest.param(path, id=name)


def _factory(directory: Path) -> Callable[[], EdgeAdapter]:
    def make() -> EdgeAdapter:
        return EdgeAdapter(directory / "edge.sqlite3")

    return make


@pytest.mark.parametrize("path", [_param(p) for p in PATHS])
def test_trace_replays_on_the_edge_runner(path: Path, tmp_path: Path) -> None:
    trace = read_trace(path)
    result = replay(trace, _factory(tmp_path))
    needs_cluster = tuple(c for c in trace.header.capabilities if c in CLUSTER_ONLY)
    if needs_cluster:
        assert result.status == "not_applicable"
        assert result.missing_capabilities == needs_cluster
        assert result.steps == 0
        return
    assert result.divergence is None, result.divergence.render()
    assert result.status == "passed"
    assert result.steps == len(trace.steps)


def test_guard_mode_finds_no_stale_write_accepted_by_the_edge_store() -> None:
    """Guard mode over the whole corpus, as `qlk conform` (the README's main job) runs it on the
    edge runner: a stale variant of every guard of every write path is refused by the runner's
    own statements."""
    report = probe_every_write(make_edge_adapter, RUN_CORPUS)
    assert not report.not_applicable
    assert report.failures == []
    assert len(report.writes) >= 20, len(report.writes)
    assert report.probes >= 150, report.probes


def test_only_cluster_capabilities_are_missing() -> None:
    """The edge runner declares every capability the corpus uses except the cluster ones."""
    used: set[str] = set()
    for path in PATHS:
        if path.parent == RUN_CORPUS:
            used.update(_named_header_capabilities(path))
    assert used >= CLUSTER_ONLY
    assert used - CAPABILITIES == CLUSTER_ONLY
    assert not CAPABILITIES & CLUSTER_ONLY


def test_the_corpus_factory_uses_a_fresh_file_and_deletes_it_on_close() -> None:
    first, second = make_edge_adapter(), make_edge_adapter()
    try:
        assert first.store.path != second.store.path
        assert first.store.path.exists()
        assert first.project() == {
            "runs": [],
            "attempts": [],
            "policies": [],
            "leases": [],
            "events": [],
        }
    finally:
        first.close()
        second.close()
    assert not first.store.path.parent.exists()
    assert not second.store.path.parent.exists()
