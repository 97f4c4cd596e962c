"""The Workflow conformance traces (SPEC §4.10, §7 component `workflow`; issue 18 item 3).

Every trace of `conformance/traces/workflow/` replays with no divergence (outcome, code, page and
the full projection after every step) on the reference store, on the edge runner over a real
database file, and on the cluster runner over a real PostgreSQL schema; a named trace cites its
SPEC item. The corpus has a named trace for every CONF item of §4.10 and Appendix D (WF-19), it
is exactly what `python -m model_tests.corpus` writes, its lines follow the JSON Schema, and an
adapter without the `workflow` capability reports every Workflow trace not applicable, never
passed. The Workflow codec round-trips every command the corpus carries and stays strict.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.run.adapter import ReferenceAdapter
from conformance.run.cluster import make_cluster_adapter
from conformance.run.corpus import WORKFLOW_CORPUS, read_text, read_trace, spec_id_of, trace_paths
from conformance.run.edge import EdgeAdapter
from conformance.run.replay import replay
from conformance.run.trace import decode_trace_command, dumps, loads
from kernel import CommandError, decode_command
from kernel.specs.properties import PROPERTIES
from kernel.workflow import (
    WORKFLOW_COMMANDS_BY_NAME,
    decode_workflow_command,
    encode_workflow_command,
    is_workflow_command,
)
from model_tests.corpus import workflow_scenarios
from tests.support.postgres import reachable_dsn
from tests.support.trace_schema import validate_line

PATHS = trace_paths(WORKFLOW_CORPUS)
NAMED = [p for p in PATHS if p.parent == WORKFLOW_CORPUS]
GENERATED = [p for p in PATHS if p.parent != WORKFLOW_CORPUS]
#: The CONF items of §4.10 and Appendix D (WF-19) that a trace can show.
CONF_ITEMS = sorted(k for k, p in PROPERTIES.items() if k.startswith("WF-") and "CONF" in p.kind)
CLUSTER_ONLY = frozenset({"cluster_recovery", "lost_retry_cluster"})


def _param(path: Path) -> object:
    """A named trace cites its SPEC item (the file name starts with the property id)."""
    name = str(path.relative_to(WORKFLOW_CORPUS))
    item = spec_id_of(name)
    if item is not None and item in PROPERTIES:
        return pytest.param(path, id=name, marks=pytest.mark.spec(item))
    return pytest.param(path, id=name)


PARAMS = [_param(p) for p in PATHS]


@pytest.fixture(scope="module")
def pg_dsn() -> Iterator[str]:
    yield from reachable_dsn("the Workflow traces")


def test_the_corpus_names_every_conf_item_and_has_generated_workflows() -> None:
    names = [p.name for p in NAMED]
    assert CONF_ITEMS == [
        "WF-05", "WF-07", "WF-08", "WF-14", "WF-15", "WF-16", "WF-17", "WF-18", "WF-19",
    ]  # fmt: skip
    assert [i for i in CONF_ITEMS if not any(n.startswith(f"{i}-") for n in names)] == []
    assert len(GENERATED) == len(workflow_scenarios.GENERATED_SEEDS) >= 10
    # WF-19 is a PostgreSQL property: its trace says so in its header.
    (wf_19,) = [p for p in NAMED if p.name.startswith("WF-19-")]
    assert read_trace(wf_19).header.profile == "cluster"


@pytest.mark.parametrize("path", NAMED, ids=lambda p: p.name)
def test_named_trace_header_schema_and_round_trip(path: Path) -> None:
    text = read_text(path)
    trace = loads(text)
    item = spec_id_of(path.name)
    assert item is not None
    assert item in PROPERTIES
    assert trace.header.component == "workflow"
    assert trace.header.name == path.name.removesuffix(".jsonl")
    assert trace.header.description.startswith(item)
    assert "workflow" in trace.header.capabilities
    assert dumps(trace) == text
    for line in text.splitlines():
        validate_line(json.loads(line))


@pytest.mark.parametrize("path", PARAMS)
def test_trace_replays_on_the_reference_store(path: Path) -> None:
    trace = read_trace(path)
    result = replay(trace, ReferenceAdapter)
    assert result.divergence is None, result.divergence.render()
    assert (result.status, result.steps) == ("passed", len(trace.steps))


@pytest.mark.parametrize("path", PARAMS)
def test_trace_replays_on_the_edge_runner(path: Path, tmp_path: Path) -> None:
    trace = read_trace(path)
    result = replay(trace, lambda: EdgeAdapter(tmp_path / "edge.sqlite3"))
    needs_cluster = tuple(c for c in trace.header.capabilities if c in CLUSTER_ONLY)
    if needs_cluster:  # the cluster recovery source: not applicable on SQLite, never passed
        assert (result.status, result.missing_capabilities) == ("not_applicable", needs_cluster)
        return
    assert result.divergence is None, result.divergence.render()
    assert (result.status, result.steps) == ("passed", len(trace.steps))


@pytest.mark.parametrize("path", PARAMS)
def test_trace_replays_on_the_cluster_runner(path: Path, pg_dsn: str) -> None:
    trace = read_trace(path)
    result = replay(trace, functools.partial(make_cluster_adapter, pg_dsn))
    assert result.divergence is None, result.divergence.render()
    assert (result.status, result.steps) == ("passed", len(trace.steps))


class _NoWorkflows(ReferenceAdapter):
    """A third-party adapter that does not persist Workflows."""

    capabilities = ReferenceAdapter.capabilities - {"workflow"}


@pytest.mark.parametrize("path", PATHS[:3] + GENERATED[:1], ids=lambda p: p.name)
def test_an_adapter_without_workflows_reports_them_not_applicable(path: Path) -> None:
    result = replay(read_trace(path), _NoWorkflows)
    assert result.status == "not_applicable"
    assert "workflow" in result.missing_capabilities
    assert result.steps == 0


def test_a_replay_that_diverges_is_reported_with_the_step() -> None:
    """A tampered expectation of a Workflow step is a divergence at that step (the replay does
    compare Workflow outcomes and tables)."""
    trace = read_trace(WORKFLOW_CORPUS / "WF-14-two-step-workflow-succeeds-once-per-step.jsonl")
    index = next(i for i, s in enumerate(trace.steps) if s.expect.code == "existing")
    steps = list(trace.steps)
    steps[index] = dataclasses.replace(
        steps[index], expect=dataclasses.replace(steps[index].expect, code="admitted")
    )
    result = replay(dataclasses.replace(trace, steps=tuple(steps)), ReferenceAdapter)
    assert result.divergence is not None
    assert result.divergence.step == index + 1
    assert result.divergence.actual == ("replayed", "existing")


def test_the_workflow_codec_round_trips_every_command_of_the_corpus() -> None:
    seen: set[str] = set()
    for path in PATHS:
        for step in read_trace(path).steps:
            if step.command is None or step.command.name not in WORKFLOW_COMMANDS_BY_NAME:
                continue
            command = decode_trace_command(step.command)
            assert is_workflow_command(command)
            assert encode_workflow_command(command) == (step.command.name, step.command.args)
            seen.add(step.command.name)
    assert seen == set(WORKFLOW_COMMANDS_BY_NAME)


def test_the_workflow_codec_is_strict_and_the_run_codec_unchanged() -> None:
    args = {"run_id": "wf", "step_run_id": "sr-a", "step_run_version": 1}
    assert decode_workflow_command("admit_task", args) == decode_workflow_command(
        *encode_workflow_command(decode_workflow_command("admit_task", args))
    )
    with pytest.raises(CommandError, match="extra: unknown member"):
        decode_workflow_command("admit_task", {**args, "extra": 1})
    with pytest.raises(CommandError, match="step_run_version: must be an integer"):
        decode_workflow_command("admit_task", {**args, "step_run_version": "1"})
    with pytest.raises(CommandError, match="unknown command name"):
        decode_workflow_command("admit_run", args)
    with pytest.raises(CommandError, match="unknown command name"):
        decode_command("admit_task", args)  # the Run codec knows only Run commands
