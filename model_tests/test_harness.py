"""The model harness itself: traces, the seeded driver, the deep command, the oracles, and that
the invariants are live (a planted bug is caught)."""

from __future__ import annotations

import dataclasses
import json
import random
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

import jsonschema
import pytest

import kernel.transitions
from conformance.run.adapter import ReferenceAdapter
from conformance.run.recorder import Recorder
from conformance.run.replay import replay
from conformance.run.trace import dumps, loads
from kernel import (
    ExpireWithLease,
    LostRetryStep,
    Outcome,
    Profile,
    RunAggregate,
    RunRetryPolicy,
    Safety,
)
from kernel.specs.codes import Code
from model_tests import deep, oracle
from model_tests.harness import ModelViolation
from model_tests.machines import (
    MACHINES,
    Picks,
    RetryExhaustionMachine,
    RunLifecycleMachine,
    drive,
    record_trace,
    write_trace,
)

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[1] / "conformance" / "run" / "trace.schema.json").read_text(
        encoding="utf-8"
    )
)
# Checked against its metaschema once and compiled once: `jsonschema.validate(line, SCHEMA)` does
# both again on every call (about 50 ms a line); the check of each line is the same.
jsonschema.validators.validator_for(SCHEMA).check_schema(SCHEMA)
VALIDATOR = jsonschema.validators.validator_for(SCHEMA)(SCHEMA)


@pytest.mark.spec("RUN-01")
@pytest.mark.parametrize("name", sorted(MACHINES))
def test_a_recorded_model_run_is_a_trace_that_replays(name: str, tmp_path: Path) -> None:
    """Every model run can be written as a trace (component `run`, the profile, the seed) that
    round-trips and replays against the reference store without a divergence."""
    trace = record_trace(name, seed=11, steps=40)
    assert trace.header.component == "run"
    assert trace.header.seed == 11
    assert trace.header.profile == "edge"
    assert set(trace.header.capabilities) <= ReferenceAdapter.capabilities
    assert len(trace.steps) >= 20
    path = write_trace(trace, tmp_path / f"{name}.jsonl")
    text = path.read_text(encoding="utf-8")
    assert dumps(loads(text)) == text
    for line in text.splitlines():
        error = jsonschema.exceptions.best_match(VALIDATOR.iter_errors(json.loads(line)))
        assert error is None, error
    result = replay(loads(text), ReferenceAdapter)
    assert result.divergence is None, result.divergence and result.divergence.render()
    assert result.steps == len(trace.steps)


def test_a_cluster_trace_names_its_profile_and_uses_only_it() -> None:
    trace = record_trace("lifecycle", seed=3, steps=120, profile=Profile.CLUSTER)
    assert trace.header.profile == "cluster"
    used = {
        s.command.args["profile"]
        for s in trace.steps
        if s.command is not None and s.command.name == "expire_with_lease"
    }
    assert used == {"cluster"}


def test_the_lazy_recorder_writes_what_an_eager_recorder_writes() -> None:
    """The harness builds projections only when the trace is asked for; the same deliveries
    through the conformance `Recorder` give the same trace, byte for byte."""
    machine = drive(RunLifecycleMachine(seed=5), random.Random(5), 60)
    lazy = machine.trace()
    eager = Recorder(machine.h.recorder.header, machine.h.names)
    for rec in machine.h.records:
        eager.step(rec.command, rec.at_ms, rec.fault)
    assert dumps(eager.trace()) == dumps(machine.h.trace())
    assert len(lazy.steps) == len(machine.h.records)


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_the_seeded_driver_is_deterministic(name: str) -> None:
    first = dumps(record_trace(name, seed=21, steps=50))
    assert dumps(record_trace(name, seed=21, steps=50)) == first
    assert dumps(record_trace(name, seed=22, steps=50)) != first


@pytest.mark.parametrize("name", sorted(MACHINES))
def test_the_driver_tables_name_every_rule_with_its_arguments(name: str) -> None:
    """`random_step` drives exactly the Hypothesis rules, with the same argument names; the
    driver checks exactly the Hypothesis invariants."""
    machine = MACHINES[name]
    state = machine.setup_state()
    rules = {r.function.__name__: set(r.arguments) for r in state.rules}
    driver = {r.name: set(r.params) for r in machine.DRIVER}
    assert driver == rules
    invariants = {i.function.__name__ for i in state.invariants}
    assert invariants == set(machine.GENERIC_INVARIANTS + machine.EXTRA_INVARIANTS)


def test_the_deep_command_runs_and_reports(capsys: pytest.CaptureFixture[str]) -> None:
    assert deep.main(["--steps", "600", "--seed", "2", "--episode-steps", "50"]) == 0
    out = capsys.readouterr().out
    assert "total: " in out
    assert "steps/s" in out
    assert "invariant checks" in out
    total = int(out.split("total: ")[1].split(" steps")[0])
    assert total >= 600


# -- the invariants are live: planted bugs are caught -------------------------------------------
@pytest.fixture
def planted() -> Iterator[dict[type, object]]:
    """Replace transitions for one test (the engine dispatches through `TRANSITIONS`)."""
    original = kernel.transitions.TRANSITIONS
    table: dict[type, object] = dict(original)
    yield table
    kernel.transitions.TRANSITIONS = original


def _drive_retry(seeds: range, steps: int) -> None:
    for seed in seeds:
        drive(RetryExhaustionMachine(seed=seed), random.Random(seed), steps)


def _install(table: dict[type, object]) -> None:
    kernel.transitions.TRANSITIONS = MappingProxyType(table)  # type: ignore[arg-type]


def test_a_cluster_expiry_that_marks_lost_is_caught(planted: dict[type, object]) -> None:
    """LEASE-12 / E-1: if cluster expiry made a started Attempt lost, the models fail."""
    real = kernel.transitions.expire_with_lease

    def buggy(agg: RunAggregate | None, command: ExpireWithLease, at: int) -> Outcome:
        return real(agg, dataclasses.replace(command, profile=Profile.EDGE), at)

    planted[ExpireWithLease] = buggy
    _install(planted)
    with pytest.raises(ModelViolation, match="LEASE-"):
        _drive_retry(range(20), 60)


def test_a_retry_that_ignores_the_cancellation_intent_is_caught(
    planted: dict[type, object],
) -> None:
    """RETRY-11: a lost retry that decides as if there were no intent is caught."""
    real = kernel.transitions.lost_retry_step

    def buggy(agg: RunAggregate | None, command: LostRetryStep, at: int) -> Outcome:
        if agg is not None and agg.run.has_cancel_intent:
            run = dataclasses.replace(agg.run, cancel_requested_at_ms=None, cancel_reason=None)
            outcome = real(dataclasses.replace(agg, run=run), command, at)
            if outcome.kind.value == "applied":
                return outcome
        return real(agg, command, at)

    planted[LostRetryStep] = buggy
    _install(planted)
    with pytest.raises(ModelViolation, match="RETRY-11"):
        _drive_retry(range(40), 80)


def test_the_deep_command_reports_a_violation_with_its_trace(
    planted: dict[type, object], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    real = kernel.transitions.expire_with_lease

    def buggy(agg: RunAggregate | None, command: ExpireWithLease, at: int) -> Outcome:
        return real(agg, dataclasses.replace(command, profile=Profile.EDGE), at)

    planted[ExpireWithLease] = buggy
    _install(planted)
    argv = ["--steps", "4000", "--machines", "retry", "--trace-dir", str(tmp_path)]
    assert deep.main(argv) == 1
    err = capsys.readouterr().err
    assert "VIOLATION" in err
    assert "--single-episode" in err
    assert list(tmp_path.glob("deep-retry-*.jsonl"))


# -- the oracles ------------------------------------------------------------------------------
def _policy(max_attempts: int, on_lost: bool, safety: Safety) -> RunRetryPolicy:
    return RunRetryPolicy("r", max_attempts, on_lost, safety, 0, 0, 1, 0, 0)


@pytest.mark.spec("RETRY-03", "RETRY-04", "RETRY-05")
def test_the_precedence_oracle_is_the_spec_table() -> None:
    assert oracle.failure_precedence(None, 1) is Code.RUN_LOST_RETRY_DISABLED
    assert oracle.failure_precedence(_policy(1, True, Safety.UNKNOWN), 1) is (
        Code.RUN_LOST_RETRY_DISABLED
    )
    assert oracle.failure_precedence(_policy(3, False, Safety.IDEMPOTENT), 1) is (
        Code.RUN_LOST_RETRY_DISABLED
    )
    assert oracle.failure_precedence(_policy(2, True, Safety.UNKNOWN), 5) is (
        Code.RUN_LOST_RETRY_UNSAFE
    )
    assert oracle.failure_precedence(_policy(3, True, Safety.DEDUPLICATED), 3) is (
        Code.RUN_LOST_RETRY_EXHAUSTED
    )
    assert oracle.failure_precedence(_policy(3, True, Safety.IDEMPOTENT), 2) is None
    assert oracle.attempts_allowed(_policy(3, True, Safety.IDEMPOTENT)) == 3
    assert oracle.attempts_allowed(_policy(3, True, Safety.UNKNOWN)) == 1


@pytest.mark.spec("RETRY-16")
def test_the_backoff_oracle_is_the_spec_formula() -> None:
    assert [oracle.backoff_ms(1_000, 60_000, n) for n in (1, 2, 3, 7, 8)] == [
        1_000,
        2_000,
        4_000,
        60_000,
        60_000,
    ]
    assert oracle.backoff_ms(0, 60_000, 9) == 0
    assert oracle.backoff_ms(1, 86_400_000, 40) == 2**15


def test_machines_are_configurable_by_their_knobs() -> None:
    small = RunLifecycleMachine.configured(MAX_LIVE_RUNS=1, MAX_RUNS=2)
    machine = drive(small(seed=4), random.Random(4), 120)
    assert 1 <= len(machine.h.state.aggregates) <= 2
    with pytest.raises(TypeError, match="no knob"):
        RunLifecycleMachine.configured(max_runs=1)


def test_picks_cycle_through_their_values() -> None:
    p = Picks((3, 1))
    assert p.choice("abcd") == "d"
    assert p.choice("abcd") == "b"
    assert p.next() == 3
