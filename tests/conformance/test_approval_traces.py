"""The approval-domain conformance traces (SPEC §5, §7 component `approved_action`; issue 19,
decision AA-D1).

Every trace of `conformance/traces/approved_action/` replays with no divergence (outcome, code,
page and the full projection after every step, the `approved_actions` and `action_events` rows
included) on the reference store and on the edge runner over a real database file; the corpus is
exactly what `python -m model_tests.corpus` writes, its named traces follow the file naming
rule and the JSON Schema; an adapter without the `approved_action` capability (the cluster
runner: §5.4 refuses Approved Actions) reports every approval trace not applicable, never
passed or diverged. The trace codec of the approval commands round-trips every command the
corpus carries and stays strict (A-1 inside a request's admission). Planted edge runner bugs in
the approval SQL (`tests/runners/edge/edge_mutants.py`, `APPROVAL_MUTANTS`) are each caught by
the mode that must catch them. These traces evidence no AA-01..AA-15 item (those are about the
supervisor and its lifecycle), so they carry no spec mark.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance.run.adapter import ReferenceAdapter
from conformance.run.cluster import CAPABILITIES as CLUSTER_CAPABILITIES
from conformance.run.cluster import make_cluster_adapter
from conformance.run.corpus import APPROVAL_CORPUS, CORPORA, read_text, read_trace, trace_paths
from conformance.run.edge import CAPABILITIES as EDGE_CAPABILITIES
from conformance.run.edge import EdgeAdapter, make_edge_adapter
from conformance.run.pages import ACTION_QUERIES, SourceQuery
from conformance.run.projection import ACTION_TABLES
from conformance.run.replay import replay
from conformance.run.trace import (
    TokenNames,
    TraceCommand,
    TraceFormatError,
    decode_trace_command,
    dumps,
    encode_trace_command,
    loads,
)
from kernel import AdmitRun, CommandError, PolicyDefinition, Rejected, Safety
from kernel.approved_action import ApproveAction, ClaimAction, RequestApproval
from kernel.approved_action.trace_codec import (
    ACTION_COMMANDS_BY_NAME,
    decode_action_command,
    encode_action_command,
    is_action_command,
)
from kernel.specs.approved_action import ActionCommandName
from model_tests.corpus import approval_scenarios
from tests.runners.edge.edge_mutants import APPROVAL_MUTANTS
from tests.support.adapters import WithoutApprovals
from tests.support.postgres import reachable_dsn
from tests.support.runner_mutants import RunnerMutant, assert_planted_and_undone, verdict_of
from tests.support.trace_schema import validate_line

PATHS = trace_paths(APPROVAL_CORPUS)
NAMED = [p for p in PATHS if p.parent == APPROVAL_CORPUS]
GENERATED = [p for p in PATHS if p.parent != APPROVAL_CORPUS]


@pytest.fixture(scope="module")
def pg_dsn() -> Iterator[str]:
    yield from reachable_dsn("the cluster check")


# -- the corpus --------------------------------------------------------------------------------
def test_the_corpus_is_exactly_what_its_generator_writes() -> None:
    expected = {
        rel: dumps(trace)
        for rel, trace in (*approval_scenarios.named(), *approval_scenarios.generated())
    }
    present = {str(p.relative_to(APPROVAL_CORPUS)): read_text(p) for p in PATHS}
    assert present.keys() == expected.keys()
    assert [rel for rel in expected if present[rel] != expected[rel]] == []
    assert len(NAMED) == len(approval_scenarios.APPROVAL_SCENARIOS) >= 8
    assert len(GENERATED) == len(approval_scenarios.GENERATED_SEEDS) >= 4
    assert APPROVAL_CORPUS in CORPORA


@pytest.mark.parametrize("path", NAMED, ids=lambda p: p.name)
def test_named_trace_header_schema_and_round_trip(path: Path) -> None:
    text = read_text(path)
    trace = loads(text)
    assert path.name.startswith("AA-D1-")
    assert trace.header.component == "approved_action"
    assert trace.header.name == path.name.removesuffix(".jsonl")
    assert trace.header.description.startswith("AA-D1")
    assert "approved_action" in trace.header.capabilities
    assert dumps(trace) == text
    for line in text.splitlines():
        validate_line(json.loads(line))


def test_the_corpus_shows_every_command_outcome_source_and_table() -> None:
    """What the brief asks the corpus to show is there: every approval command applied, each
    refusal code, both due indexes with a cursor and a truncated page, and both tables."""
    applied: set[tuple[str, str]] = set()
    refused: set[str] = set()
    sources: set[tuple[str, bool, bool]] = set()
    tables: set[str] = set()
    for path in PATHS:
        for step in read_trace(path).steps:
            tables |= set(step.expect.projection) & set(ACTION_TABLES)
            if step.command is not None and step.command.name in ACTION_COMMANDS_BY_NAME:
                if step.expect.kind == "applied":
                    applied.add((step.command.name, step.expect.code or ""))
                elif step.expect.code is not None:
                    refused.add(step.expect.code)
            if isinstance(step.page, SourceQuery) and step.expect.page is not None:
                page = step.page
                sources.add((page.source, page.after is not None, step.expect.page["has_more"]))
    assert {name for name, _ in applied} == {c.value for c in ActionCommandName}
    assert {
        ("start_action", "started"),
        ("start_action", "verified_started"),
        ("start_action", "evidence_contradicted"),
        ("resolve_action", "verified_not_started"),
        ("resolve_action", "verified_started"),
        ("resolve_action", "evidence_contradicted"),
    } <= applied
    assert {
        "existing",
        "already_applied",
        "ACTION_ID_CONFLICT",
        "ACTION_NOT_PENDING",
        "ACTION_NOT_FOUND",
        "NOT_ELIGIBLE",
        "CAS_CONFLICT",
        "INVALID_RUN_RETRY_POLICY",
        "RUN_RETRY_POLICY_NOT_ADMISSIBLE",
    } <= refused
    for source in ACTION_QUERIES:
        assert (source, True, True) in sources
        assert (source, False, True) in sources
    assert tables == set(ACTION_TABLES)


# -- replay ------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", PATHS, ids=lambda p: str(p.relative_to(APPROVAL_CORPUS)))
def test_trace_replays_on_the_reference_store(path: Path) -> None:
    trace = read_trace(path)
    result = replay(trace, ReferenceAdapter)
    assert result.divergence is None, result.divergence.render()
    assert (result.status, result.steps) == ("passed", len(trace.steps))


@pytest.mark.parametrize("path", PATHS, ids=lambda p: str(p.relative_to(APPROVAL_CORPUS)))
def test_trace_replays_on_the_edge_runner(path: Path, tmp_path: Path) -> None:
    trace = read_trace(path)
    result = replay(trace, lambda: EdgeAdapter(tmp_path / "edge.sqlite3"))
    assert result.divergence is None, result.divergence.render()
    assert (result.status, result.steps) == ("passed", len(trace.steps))


def test_a_tampered_action_row_is_a_divergence_at_its_step(tmp_path: Path) -> None:
    """The replay compares the approval tables field by field: an expected Event author the
    edge store did not write is reported at that step with the field."""
    path = APPROVAL_CORPUS / "AA-D1-request-deny-never-runs.jsonl"
    lines = read_text(path).splitlines()
    step = json.loads(lines[1])
    step["expect"]["projection"]["action_events"][0]["by"] = "eve"
    trace = read_trace(path)
    tampered = loads("\n".join([lines[0], _redigest(step), *lines[2:]]) + "\n")
    result = replay(tampered, lambda: EdgeAdapter(tmp_path / "edge.sqlite3"))
    assert result.divergence is not None
    assert result.divergence.step == 1
    assert result.divergence.projection_diff == (
        "action_events[apr-1/1].by: expected 'eve', got 'alice'",
    )
    assert replay(trace, make_edge_adapter).status == "passed"


def _redigest(step: dict[str, object]) -> str:
    from conformance.run.trace import canonical, projection_digest  # noqa: PLC0415

    expect = step["expect"]
    assert isinstance(expect, dict)
    expect["digest"] = projection_digest(expect["projection"])
    return canonical(step)


@pytest.mark.parametrize("path", NAMED[:3] + GENERATED[:1], ids=lambda p: p.name)
def test_an_adapter_without_approvals_reports_them_not_applicable(path: Path) -> None:
    result = replay(read_trace(path), WithoutApprovals)
    assert result.status == "not_applicable"
    assert result.missing_capabilities == ("approved_action",)
    assert result.steps == 0


def test_the_edge_runner_declares_approvals_and_the_cluster_runner_does_not() -> None:
    assert "approved_action" in EDGE_CAPABILITIES
    assert "approved_action" in ReferenceAdapter.capabilities
    assert "approved_action" not in CLUSTER_CAPABILITIES  # SPEC §5.4


@pytest.mark.parametrize("path", NAMED[:2], ids=lambda p: p.name)
def test_the_cluster_runner_reports_approval_traces_not_applicable(path: Path, pg_dsn: str) -> None:
    result = replay(read_trace(path), lambda: make_cluster_adapter(pg_dsn))
    assert (result.status, result.missing_capabilities) == ("not_applicable", ("approved_action",))
    assert result.divergence is None


# -- the codec ---------------------------------------------------------------------------------
def test_the_codec_round_trips_every_command_of_the_corpus() -> None:
    names = TokenNames()
    seen: set[str] = set()
    for path in PATHS:
        for step in read_trace(path).steps:
            if step.command is None or step.command.name not in ACTION_COMMANDS_BY_NAME:
                continue
            decoded = decode_trace_command(step.command)
            if isinstance(decoded, Rejected):
                continue
            assert is_action_command(decoded)
            assert encode_trace_command(decoded, names) == step.command
            seen.add(step.command.name)
    assert seen == set(ACTION_COMMANDS_BY_NAME)


def test_a_request_carries_its_admission_and_the_providers_policy_beside_it() -> None:
    policy = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 60_000)
    admission = AdmitRun("run-1", "run-1-a1", "project", "task", 1, "local.posix", policy)
    command = RequestApproval("apr-1", admission, "alice")
    name, args, provider = encode_action_command(command)
    assert name == "request_approval"
    assert "provider_policy" not in args["admission"]  # type: ignore[operator]
    assert provider == {
        "max_attempts": 3,
        "retry_on_lost": True,
        "safety": "idempotent",
        "backoff_base_ms": 1_000,
        "backoff_max_ms": 60_000,
    }
    assert decode_action_command(name, args, provider_policy=policy) == command
    assert encode_action_command(ApproveAction("apr-1", "bob")) == (
        "approve_action",
        {"action_id": "apr-1", "decided_by": "bob"},
        None,
    )


@pytest.mark.parametrize(
    ("name", "args", "field"),
    [
        ("approve_action", {"action_id": "apr-1"}, "decided_by"),
        ("approve_action", {"action_id": "apr-1", "decided_by": "bob", "x": 1}, "x"),
        ("claim_action", {"action_id": 7}, "action_id"),
        ("claim_action", {"action_id": "not portable!"}, "action_id"),
        ("deny_action", {"action_id": "apr-1", "decided_by": " bob"}, "decided_by"),
        (
            "request_approval",
            {"action_id": "apr-1", "requested_by": "a", "admission": 1},
            "admission",
        ),
        (
            "request_approval",
            {"action_id": "apr-1", "requested_by": "a", "admission": {"run_id": "run-1"}},
            "admission.attempt_id",
        ),
        ("launch_action", {"action_id": "apr-1"}, "command"),
    ],
)
def test_the_codec_is_strict(name: str, args: dict[str, object], field: str) -> None:
    with pytest.raises(CommandError) as raised:
        decode_action_command(name, args)
    assert raised.value.field == field


def test_a_policy_inside_the_admission_is_refused_as_a_1_and_only_a_request_takes_one() -> None:
    admission = {
        "run_id": "run-1",
        "attempt_id": "run-1-a1",
        "project_id": "project",
        "task_id": "task",
        "task_revision": 1,
        "executor_type": "local.posix",
        "retry_on_lost": True,
    }
    args = {"action_id": "apr-1", "requested_by": "alice", "admission": admission}
    refused = decode_action_command("request_approval", args)
    assert isinstance(refused, Rejected)
    assert refused.code.value == "RUN_RETRY_POLICY_NOT_ADMISSIBLE"
    policy = PolicyDefinition(1, False, Safety.UNKNOWN, 0, 0)
    with pytest.raises(CommandError) as raised:
        decode_action_command("claim_action", {"action_id": "apr-1"}, provider_policy=policy)
    assert raised.value.field == "provider_policy"
    wire = TraceCommand("claim_action", {"action_id": "apr-1"}, {"max_attempts": 1})
    with pytest.raises(CommandError):
        decode_trace_command(wire)
    assert decode_trace_command(TraceCommand("claim_action", {"action_id": "apr-1"})) == (
        ClaimAction("apr-1")
    )


def test_a_due_query_with_a_malformed_cursor_is_a_malformed_trace() -> None:
    path = NAMED[0]
    lines = read_text(path).splitlines()
    query = next(i for i, line in enumerate(lines) if '"query"' in line)
    step = json.loads(lines[query])
    step["query"]["after"] = ["apr-1", 5]
    lines[query] = json.dumps(step)
    with pytest.raises(TraceFormatError) as raised:
        loads("\n".join(lines) + "\n")
    assert (raised.value.line, raised.value.field) == (query + 1, "query.after")


# -- planted runner bugs -----------------------------------------------------------------------
def test_every_approval_mutant_is_named_aa_and_well_formed() -> None:
    assert len(APPROVAL_MUTANTS) >= 3
    assert len({m.name for m in APPROVAL_MUTANTS}) == len(APPROVAL_MUTANTS)
    for mutant in APPROVAL_MUTANTS:
        assert mutant.name.startswith("aa_")
        assert mutant.runner == "edge"
        assert mutant.modes
        assert mutant.boundary


@pytest.mark.parametrize("mutant", APPROVAL_MUTANTS, ids=lambda m: m.name)
def test_the_approval_mutant_is_exact_planted_and_undone(
    mutant: RunnerMutant, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert_planted_and_undone(mutant, monkeypatch)


@pytest.mark.parametrize("mutant", APPROVAL_MUTANTS, ids=lambda m: m.name)
def test_the_approval_corpus_catches_the_planted_bug(
    mutant: RunnerMutant, monkeypatch: pytest.MonkeyPatch
) -> None:
    verdict = verdict_of(
        mutant, monkeypatch, make_edge_adapter, EDGE_CAPABILITIES, root=APPROVAL_CORPUS
    )
    assert verdict.caught, verdict.survivor()
    # Undone: the corpus passes again on the real runner.
    assert replay(read_trace(NAMED[0]), make_edge_adapter).status == "passed"
