"""The trace codec round-trips exactly, every line matches the JSON Schema, malformed traces are
refused with the line and field named, and recorded traces replay cleanly on the reference."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conformance.run.adapter import ReferenceAdapter, StepResult
from conformance.run.corpus import RUN_CORPUS, read_trace
from conformance.run.faults import Fault, FaultKind
from conformance.run.pages import ExpiryPass
from conformance.run.recorder import Recorder
from conformance.run.replay import replay, step_label
from conformance.run.trace import (
    AnyCommand,
    Expectation,
    Step,
    Trace,
    TraceFormatError,
    TraceHeader,
    dumps,
    loads,
    projection_digest,
)
from kernel import AdmitRun
from tests.support.sim import Sim, advance_clock, draw_command
from tests.support.trace_schema import validate_line

FAULTS = st.one_of(
    st.none(),
    st.none(),
    st.none(),
    st.builds(Fault, st.just(FaultKind.CRASH_BEFORE_COMMIT)),
    st.builds(Fault, st.just(FaultKind.CRASH_AFTER_COMMIT)),
    st.builds(Fault, st.just(FaultKind.DUPLICATE_DELIVERY)),
    st.builds(Fault, st.just(FaultKind.IO_ERROR), st.integers(1, 5)),
)


def record_random(data: st.DataObject, steps: int) -> Trace:
    """Drive the simulator's command menu through a Recorder (the reference store)."""
    sim = Sim()
    recorder = Recorder(TraceHeader(name="random", seed=0))
    for _ in range(steps):
        advance_clock(data, sim)
        command = draw_command(data, sim)
        if data.draw(st.integers(0, 9)) == 0:
            recorder.step(None, sim.now, Fault(FaultKind.REOPEN))
            continue
        if command is None:
            continue
        recorder.step(command, sim.now, data.draw(FAULTS))
        sim.step(command)  # keep the simulator's view for drawing plausible next commands
        store = recorder.adapter.store
        sim.agg = next(iter(store.aggregates()), None)
    return recorder.trace()


@settings(max_examples=40)
@given(st.data())
def test_codec_round_trips_exactly(data: st.DataObject) -> None:
    """`loads(dumps(t)) == t` for traces recorded from random command sequences with faults,
    and dumping again gives the same bytes."""
    trace = record_random(data, 15)
    text = dumps(trace)
    assert loads(text) == trace
    assert dumps(loads(text)) == text


@pytest.mark.slow  # about 7 s
@settings(max_examples=20)
@given(st.data())
def test_every_line_matches_the_schema_and_replays(data: st.DataObject) -> None:
    """Each recorded line validates against conformance/run/trace.schema.json, and the trace
    replays on a fresh reference adapter with no divergence."""
    trace = record_random(data, 15)
    for line in dumps(trace).splitlines():
        validate_line(json.loads(line))
    result = replay(loads(dumps(trace)), ReferenceAdapter)
    assert result.divergence is None, result.divergence.render() if result.divergence else ""
    assert result.steps == len(trace.steps)


def _sample() -> str:
    return (
        '{"capabilities":[],"component":"run","kernel_version":"0.1.0","name":"t",'
        '"profile":"edge","seed":0,"trace_version":1}\n'
    )


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ("", 1, "header"),
        ("[1]\n", 1, "line"),
        (_sample().replace('"trace_version":1', '"trace_version":2'), 1, "trace_version"),
        (_sample().replace('"component":"run"', '"component":"x"'), 1, "component"),
        (_sample().replace('"seed":0', '"seed":0,"extra":1'), 1, "extra"),
        (_sample() + '{"step":1}\n', 2, "expect"),
        (_sample() + "{not json\n", 2, "json"),
    ],
)
def test_malformed_traces_name_line_and_field(text: str, line: int, field: str) -> None:
    with pytest.raises(TraceFormatError) as caught:
        loads(text)
    assert (caught.value.line, caught.value.field) == (line, field)


def test_a_tampered_projection_is_refused_and_a_wrong_one_diverges() -> None:
    """The digest guards the projection; a trace whose expectation is wrong (re-digested)
    replays as a divergence with a field-level diff."""
    recorder = Recorder(TraceHeader(name="tamper"))
    sim = Sim()
    recorder.step(AdmitRun("run-1", "a1", "p", "t", 1, "shell"), sim.now)
    text = dumps(recorder.trace())
    tampered = text.replace('"status":"queued"', '"status":"running"', 1)
    with pytest.raises(TraceFormatError) as caught:
        loads(tampered)
    assert caught.value.field == "expect.digest"

    trace = recorder.trace()
    step = trace.steps[0]
    wrong = json.loads(json.dumps(step.expect.projection))
    wrong["runs"][0]["status"] = "running"
    bad = Trace(
        trace.header,
        (
            Step(
                step.step,
                step.command,
                step.observed_at_ms,
                Expectation(step.expect.kind, step.expect.code, wrong, projection_digest(wrong)),
            ),
        ),
    )
    result = replay(bad, ReferenceAdapter)
    assert result.divergence is not None
    assert result.divergence.projection_diff == (
        "runs[run-1].status: expected 'running', got 'queued'",
    )
    assert "step 1 (admit_run) diverged" in result.divergence.render()


def test_a_missing_capability_is_not_applicable_never_passed() -> None:
    recorder = Recorder(TraceHeader(name="cap", capabilities=("journal_files",)))
    result = replay(recorder.trace(), ReferenceAdapter)
    assert result.status == "not_applicable"
    assert result.missing_capabilities == ("journal_files",)


def _paged_trace() -> Trace:
    """Two lost Runs, a source query and a local lost-retry page with a failing candidate."""
    return read_trace(RUN_CORPUS / "RETRY-17-local-candidate-error-counted-page-continues.jsonl")


def test_page_steps_round_trip_and_a_wrong_page_diverges() -> None:
    """A page step's expectation is the page itself: a source returning other items, or a
    tally off by one, is a divergence that shows both pages."""
    trace = _paged_trace()
    assert loads(dumps(trace)) == trace
    index = next(i for i, s in enumerate(trace.steps) if s.page is not None)
    step = trace.steps[index]
    assert step.expect.page is not None
    wrong_page = dict(step.expect.page) | {"errored": step.expect.page["errored"] + 1}
    wrong = dataclasses.replace(step, expect=dataclasses.replace(step.expect, page=wrong_page))
    steps = (*trace.steps[:index], wrong, *trace.steps[index + 1 :])
    result = replay(Trace(trace.header, steps), ReferenceAdapter)
    assert result.divergence is not None
    assert result.divergence.step == index + 1
    assert result.divergence.command == "pass lost_retry_page"
    assert "expected page" in result.divergence.render()


def test_an_expiry_pass_is_labelled_and_round_trips() -> None:
    """INBOX-42's step: one `lease_expiry_page` call, named as such in reports."""
    path = next(RUN_CORPUS.glob("INBOX-42-*.jsonl"))
    trace = read_trace(path)
    assert loads(dumps(trace)) == trace
    passes = [s for s in trace.steps if isinstance(s.page, ExpiryPass)]
    assert passes
    assert {step_label(s) for s in passes} == {"pass lease_expiry_page"}


@pytest.mark.parametrize(
    ("member", "field"),
    [
        ('"query":{"source":"nope","limit":1}', "query.source"),
        ('"query":{"source":"lost_retry","limit":65}', "query.limit"),
        ('"query":{"source":"lost_retry","limit":1,"after":null}', "query.after"),
        ('"query":{"source":"orphaned_created","limit":1}', "query.process_started_at_ms"),
        (
            '"pass":{"name":"lost_retry_page","limit":1,"fail_closed":1,"attempt_suffix":"s"}',
            "fail_closed",
        ),
        ('"pass":{"name":"sweep","limit":1,"fail_closed":true,"attempt_suffix":"s"}', "pass.name"),
        (
            '"pass":{"name":"lease_expiry_page","limit":1,"after":[1],"profile":"edge"}',
            "pass.after",
        ),
        (
            '"pass":{"name":"lease_expiry_page","limit":1,"after":null,"profile":"moon"}',
            "pass.profile",
        ),
        (
            '"pass":{"name":"lease_expiry_page","limit":1,"after":null,"profile":"edge","x":1}',
            "pass.x",
        ),
        (
            '"pass":{"name":"lease_expiry_page","limit":0,"after":null,"profile":"edge"}',
            "pass.limit",
        ),
    ],
)
def test_malformed_page_steps_name_the_field(member: str, field: str) -> None:
    projection: dict[str, list[dict[str, Any]]] = {
        "runs": [],
        "attempts": [],
        "policies": [],
        "leases": [],
        "events": [],
    }
    step = (
        '{"step":1,"observed_at_ms":1,"command":null,' + member + ',"expect":{"kind":"page",'
        '"code":null,"page":{},"projection":'
        + json.dumps(projection)
        + ',"digest":"'
        + projection_digest(projection)
        + '"}}\n'
    )
    with pytest.raises(TraceFormatError) as caught:
        loads(_sample() + step)
    assert caught.value.field == field


def test_a_refused_page_capability_makes_the_trace_not_applicable() -> None:
    trace = _paged_trace()
    assert "lost_retry_local" in trace.header.capabilities

    class ClusterOnly(ReferenceAdapter):
        capabilities = ReferenceAdapter.capabilities - {"lost_retry_local"}

    result = replay(trace, ClusterOnly)
    assert result.status == "not_applicable"
    assert result.missing_capabilities == ("lost_retry_local",)


class ExplodingAdapter(ReferenceAdapter):
    """A runner whose store fails with an unexpected error on the second step."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def apply(
        self, command: AnyCommand | None, observed_at_ms: int, fault: Fault | None
    ) -> StepResult:
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("database is locked")
        return super().apply(command, observed_at_ms, fault)


def test_a_runner_exception_is_a_divergence_not_a_crash_of_the_suite() -> None:
    trace = read_trace(RUN_CORPUS / "LEASE-10-tokens-stored-only-as-digests.jsonl")
    result = replay(trace, ExplodingAdapter)
    assert result.divergence is not None
    assert result.divergence.step == 2
    assert result.divergence.actual == ("exception", "RuntimeError")


def test_an_attempt_id_is_unique_across_runs_in_the_reference_store() -> None:
    """§1.1: attempt_id is a primary key; a second Run reusing it loses like a colliding insert
    in SQL (Raced), so the oracle and the runners agree."""
    recorder = Recorder(TraceHeader(name="ids"))
    first = recorder.step(AdmitRun("r1", "shared", "p", "t", 1, "shell"), 1)
    second = recorder.step(AdmitRun("r2", "shared", "p", "t", 1, "shell"), 2)
    assert (first.kind, second.kind, second.code) == ("applied", "raced", "CAS_CONFLICT")
    assert [r["run_id"] for r in recorder.adapter.project()["runs"]] == ["r1"]


@pytest.mark.parametrize("kind", list(FaultKind))
def test_a_trace_with_a_fault_step_needs_the_faults_capability(kind: FaultKind) -> None:
    """Decision M-3: the recorder tags a trace with `faults` as soon as one step carries a
    fault (a runner without the capability then reports it not applicable), and only then."""
    plain = Recorder(TraceHeader(name="plain"))
    plain.step(AdmitRun("run-1", "a1", "p", "t", 1, "shell"), 1_000)
    assert "faults" not in plain.trace().header.capabilities
    faulted = Recorder(TraceHeader(name="faulted"))
    fault = Fault(kind, at_effect=1) if kind is FaultKind.IO_ERROR else Fault(kind)
    if kind is FaultKind.CLOCK_SKEW:
        fault = Fault(kind, skew_ms=-1)
    faulted.step(AdmitRun("run-1", "a1", "p", "t", 1, "shell"), 1_000, fault)
    assert "faults" in faulted.trace().header.capabilities
