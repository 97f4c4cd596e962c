"""The Worker receiver and recovery model under the active Hypothesis profile (issue 6 item 7,
model half; `model_tests/worker_machine.py`).

`ci` (default, derandomized): the file-journal machine and the SQLite-journal machine each
run their `WORKER_BUDGETS` row, with crashes injected at every port call; the last test
checks that the budget really injected every fault kind, restarted Workers, ran concurrent
duplicates and reached completions, and prints the figures. `deep`
(`QL3_HYPOTHESIS_PROFILE=deep`) runs the larger budget. The planted-bug tests run the same
machine against a receiver that starts the Executor again from `launching` and assert that
the model catches it.
"""

from __future__ import annotations

import functools
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from kernel.specs.journal import DeliveryKind, JournalState
from kernel.worker.journal import Found, HandleReturned, LaunchOutcomeUnknown
from kernel.worker.record import Offer
from model_tests.harness import STATS, ModelViolation
from model_tests.worker_machine import (
    TRACE_DIR_ENV,
    WORKER_STATS,
    FaultKind,
    WorkerMachine,
    drive,
    worker_settings,
)
from runners.worker.receiver import DeliveryResult, Receiver

pytestmark = pytest.mark.slow  # model checking / planted bugs: a slow tier


class SqliteWorkerMachine(WorkerMachine):
    """The same machine on the SQLite journal adapter."""

    ADAPTER = "sqlite"


# The budgeted tests in this session: name -> (steps, seconds), and the faults they injected.
BUDGETED: dict[str, tuple[int, float]] = {}
BUDGET_FAULTS: Counter[str] = Counter()
BUDGET_COUNTS: Counter[str] = Counter()

MODEL_IDS = (
    "INBOX-01",
    "INBOX-02",
    "INBOX-03",
    "INBOX-04",
    "INBOX-05",
    "INBOX-06",
    "INBOX-07",
    "INBOX-08",
    "INBOX-10",
    "INBOX-15",
    "INBOX-34",
    "INBOX-38",
    "INBOX-39",
    "INBOX-41",
    "INBOX-44",
)


def _budgeted(name: str, run: Callable[[], None]) -> None:
    before = STATS.of("worker").steps
    faults = Counter(WORKER_STATS.faults)
    counts = _counts()
    started = time.perf_counter()
    try:
        run()
    finally:
        steps, seconds = BUDGETED.get(name, (0, 0.0))
        BUDGETED[name] = (
            steps + STATS.of("worker").steps - before,
            seconds + time.perf_counter() - started,
        )
        BUDGET_FAULTS.update(Counter(WORKER_STATS.faults) - faults)
        BUDGET_COUNTS.update(_counts() - counts)


def _run_budget(machine: type[WorkerMachine]) -> None:
    run_state_machine_as_test(machine, settings=worker_settings(machine))


def _counts() -> Counter[str]:
    s = WORKER_STATS
    return Counter(
        {
            "restarts": s.restarts,
            "start_calls": s.start_calls,
            "concurrent_steps": s.concurrent_steps,
            "completions": s.completions,
        }
    )


@pytest.mark.spec(*MODEL_IDS)
class TestWorkerModelFileJournal(WorkerMachine.TestCase):  # type: ignore[misc,valid-type]
    """The receiver, lease lifecycle, lease-loss coordinator, startup audit and supervisor
    and retention on the real file journal, crashes at every journal write (before, after,
    inside at the k-th OS call) and every port call; after every step: `Executor.start()` at
    most once per offer (INBOX-04, I-J1), the `launching` barrier with the callback pair
    durable at the call (I-J2, INBOX-03), no start from a step that found `launching` or later
    (INBOX-05/06), every durable write a §3.6 row with revision + 1 and final states only
    deleted (INBOX-01/02, I-J3), the disk equal to the last durable write after every crash
    and restart (INBOX-15), §3.3 for every revision (I-J4), submit -> completion_acknowledged
    -> receipt deletion (INBOX-34), deletions only of final records, receipts first (INBOX-39,
    INBOX-41), no control-plane state the Worker did not cause, no token in any result
    (INBOX-38/44), idempotent redelivery (INBOX-07, INBOX-10)."""

    settings = worker_settings(WorkerMachine)

    def runTest(self) -> None:
        _budgeted("file", super().runTest)


@pytest.mark.spec(*MODEL_IDS)
class TestWorkerModelSqliteJournal(SqliteWorkerMachine.TestCase):  # type: ignore[misc,valid-type]
    """The same machine and properties on the SQLite journal adapter (§3.1: a cluster
    Worker's adapter passes the same suite); crashes inside a write land at its transaction
    steps (begun, checked, written, committed)."""

    settings = worker_settings(SqliteWorkerMachine)

    def runTest(self) -> None:
        _budgeted("sqlite", super().runTest)


# -- traces ----------------------------------------------------------------------------------
HEADER_KEYS = {
    "trace_version",
    "name",
    "component",
    "profile",
    "seed",
    "kernel_version",
    "description",
    "capabilities",
}


def _read_traces(directory: Path) -> list[list[dict[str, object]]]:
    traces = []
    for path in sorted(directory.glob("*.jsonl")):
        assert path.name.startswith("INBOX-04-worker-")  # §7: the file name starts with the id
        lines = path.read_text(encoding="utf-8").splitlines()
        traces.append([json.loads(line) for line in lines])
    return traces


@pytest.mark.spec("INBOX-38", "INBOX-44")
def test_every_machine_run_is_a_trace_without_a_raw_token(tmp_path: Path) -> None:
    """SPEC §7: every seeded machine run writes one JSON Lines trace (header with
    trace_version, name, component `journal`, profile `worker`, seed, kernel_version,
    description, capabilities; then one line per step with step, command {name, args},
    observed_at_ms, optional fault, expect); the steps cover crashes and reopens; no line
    contains a lease token or a callback token the run used (S-1)."""
    machine_cls = WorkerMachine.configured(TRACE_DIR=str(tmp_path))
    secrets: list[str] = []
    for seed in range(6):
        machine = drive(machine_cls(seed=seed), random.Random(seed), 60)
        secrets.extend(machine.secrets_used())
    traces = _read_traces(tmp_path)
    assert len(traces) == 6
    assert len(secrets) > 6  # lease tokens of every Run and the callback tokens of the starts
    fault_kinds: set[str] = set()
    for lines in traces:
        header, steps = lines[0], lines[1:]
        assert set(header) == HEADER_KEYS
        assert (header["component"], header["profile"], header["trace_version"]) == (
            "journal",
            "worker",
            1,
        )
        assert len(steps) >= 61  # setup + 60 rule steps (+ a restart line after each crash)
        for index, step in enumerate(steps):
            assert step["step"] == index
            assert {"step", "command", "observed_at_ms", "expect"} <= set(step)
            assert set(step) <= {"step", "command", "observed_at_ms", "fault", "expect"}
            command = step["command"]
            assert isinstance(command, dict)
            assert set(command) == {"name", "args"}
            expect = step["expect"]
            assert isinstance(expect, dict)
            assert {"journal", "executor_calls", "attempts", "outcome"} <= set(expect)
            fault = step.get("fault")
            if isinstance(fault, dict):
                fault_kinds.add(str(fault["kind"]))
    assert "reopen" in fault_kinds
    assert fault_kinds & {"crash_before", "crash_after", "crash_inside"}
    text = "\n".join(p.read_text(encoding="utf-8") for p in tmp_path.glob("*.jsonl"))
    for secret in secrets:
        assert secret not in text


@pytest.mark.spec("INBOX-04")
def test_hypothesis_runs_write_their_traces_where_the_environment_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`QL3_MODEL_TRACE_DIR`: each Hypothesis example's machine run is written as a trace;
    every line parses as JSON."""
    monkeypatch.setenv(TRACE_DIR_ENV, str(tmp_path))
    run_state_machine_as_test(
        WorkerMachine,
        settings=settings(
            max_examples=4,
            stateful_step_count=15,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
    traces = _read_traces(tmp_path)
    assert len(traces) >= 4
    assert all(t[0]["component"] == "journal" and len(t) >= 2 for t in traces)


# -- the planted bug (TEST ONLY) -------------------------------------------------------------
class PlantedDoubleStartReceiver(Receiver):
    """*** PLANTED BUG, for the model's self-check only; never use it elsewhere. ***

    On a delivery that finds `launching` with no operation of this process in flight it
    prepares a new context and calls `Executor.start()` again (then writes `started`), instead
    of writing `recovery_required(launch_outcome_unknown)` and never calling the Executor
    (§3.7): exactly the "maybe spawned -> spawn again" the journal exists to prevent."""

    def _deliver(self, offer: Offer) -> DeliveryResult:
        found = self._engine.read(offer.offer_id)
        record = found.record if isinstance(found, Found) else None
        if record is None or record.state is not JournalState.LAUNCHING:
            return super()._deliver(offer)
        started_at = record.executor_started_at_ms
        assert started_at is not None
        try:
            context = self._factory.prepare(record, started_at)
            handle = self._executor.start(context)  # <- the planted second start
        except Exception:
            self._engine.write(record, LaunchOutcomeUnknown())
            return super()._deliver(offer)
        self._engine.write(record, HandleReturned(handle, None))
        return super()._deliver(offer)  # continues from `started`: the running ACK


def _search(machine: type[WorkerMachine]) -> None:
    """A derandomized search without shrinking (fast and reproducible)."""
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=120,
            stateful_step_count=30,
            deadline=None,
            derandomize=True,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def _focused(receiver: type[Receiver], kind: FaultKind) -> type[WorkerMachine]:
    """Faults only at `Executor.start()`: the crash windows in which `launching` is left
    behind, so the search spends its budget where the planted bug lives."""
    return WorkerMachine.configured(
        RECEIVER=receiver, FAULT_KINDS=(kind,), FAULT_PORTS=("executor.start",), CONCURRENCY=False
    )


@pytest.mark.spec("INBOX-04")
def test_the_model_catches_a_planted_second_start_after_a_crash_after_start() -> None:
    """INBOX-04 / I-J1: with the planted receiver, a crash after `Executor.start()` returned
    (the process exists, the handle is lost, the journal says `launching`), a restart and a
    redelivery make the second start; the INBOX-04 invariant fires."""
    with pytest.raises(ModelViolation) as caught:
        _search(_focused(PlantedDoubleStartReceiver, FaultKind.CRASH_AFTER))
    assert str(caught.value).startswith("INBOX-04: I-J1: Executor.start() called 2 times")


@pytest.mark.spec("INBOX-05")
def test_the_model_catches_a_planted_start_after_a_crash_before_start() -> None:
    """INBOX-05: with the planted receiver and a crash right before `Executor.start()` (the
    `launching` barrier durable, nothing spawned) the start count stays 1, but the start came
    from a step that found `launching`: the INBOX-05 check fires."""
    with pytest.raises(ModelViolation) as caught:
        _search(_focused(PlantedDoubleStartReceiver, FaultKind.CRASH_BEFORE))
    assert str(caught.value).startswith("INBOX-05: Executor.start() for ")


@pytest.mark.spec("INBOX-04", "INBOX-05")
def test_the_same_focused_search_passes_on_the_real_receiver() -> None:
    """The control for the two planted-bug tests: the same searches on the real `Receiver`
    find nothing (the violations above are the planted bug's, not the model's)."""
    before = WORKER_STATS.start_calls
    for kind in (FaultKind.CRASH_AFTER, FaultKind.CRASH_BEFORE):
        _search(_focused(Receiver, kind))
    assert WORKER_STATS.start_calls > before


# -- what the model found ------------------------------------------------------------------------
@pytest.mark.spec("INBOX-40")
def test_a_lost_renewal_answer_is_not_a_lease_loss() -> None:
    """§3.15 / INBOX-40 (found by this model; fixed in `runners/worker/lease_lifecycle.py`): a
    renewal commits on the control plane but its answer is lost, so the lifecycle still holds
    the old version; the next renewal is refused with `LEASE_VERSION_MISMATCH`. The lease is
    still this Worker's (the version check follows every identity check of the fence), so it
    must not be reported lost: otherwise the lease-loss coordinator stops the healthy process
    and the record becomes `lease_lost_local_execution_stopped`. The machine's §3.15 check
    (no loss notification while the control plane holds the lease live) fires without the fix."""
    machine = WorkerMachine(seed=7)
    try:
        machine.setup(1, ["ok", "ok", "ok"])
        machine.deliver(0, "current", DeliveryKind.NEW_CLAIM)
        offer_id = machine.runs[0].offer_id
        assert machine.disk[offer_id].state is JournalState.RUNNING_ACKNOWLEDGED
        machine.advance_clock(10_000)
        machine.arm_fault(1, FaultKind.LOST_RESPONSE, "control.renew", 1)
        machine.tick()  # committed on the control plane, answer lost
        machine.check_all()
        machine.advance_clock(10_000)
        machine.tick()  # renews with the old version: the mismatch
        machine.check_all()
        assert machine.disk[offer_id].state is JournalState.RUNNING_ACKNOWLEDGED
        assert machine.children[offer_id].alive
        assert machine.w.lifecycle.tracked() == (offer_id,)
        faults = [line.get("fault") for line in machine.lines]
        assert {"kind": "lost_response", "port": "control.renew"} in faults
    finally:
        machine.teardown()


# -- the budget ------------------------------------------------------------------------------
@pytest.mark.spec("INBOX-04")
def test_the_ci_budget_injected_every_fault_kind() -> None:
    """The budgeted runs (run here when their tests did not run in this session) made steps,
    restarted Workers, delivered concurrently, reached `completion_acknowledged`, and injected
    every fault kind; the figures are printed."""
    machines: tuple[tuple[str, type[WorkerMachine]], ...] = (
        ("file", WorkerMachine),
        ("sqlite", SqliteWorkerMachine),
    )
    for name, machine in machines:
        if name not in BUDGETED:
            _budgeted(name, functools.partial(_run_budget, machine))
    by_kind: Counter[str] = Counter()
    for key, n in BUDGET_FAULTS.items():
        by_kind[key.split(" ", 1)[0]] += n
    steps = sum(s for s, _ in BUDGETED.values())
    print(
        f"\nworker model ({settings.get_current_profile_name()}): "
        + ", ".join(f"{k} {s} steps in {t:.1f} s" for k, (s, t) in sorted(BUDGETED.items()))
        + f"; faults by kind {dict(sorted(by_kind.items()))} at {len(BUDGET_FAULTS)} "
        f"(kind, port) pairs; {dict(BUDGET_COUNTS)}"
    )
    assert steps > 1_000
    assert set(by_kind) == {k.value for k in FaultKind}, by_kind
    for counter in ("restarts", "start_calls", "concurrent_steps", "completions"):
        assert BUDGET_COUNTS[counter] > 0, counter
