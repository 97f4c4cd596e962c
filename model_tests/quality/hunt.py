"""Hunting one planted bug with the models, under the active Hypothesis profile's budget.

`hunt(mutant)` applies the mutant and runs the model engines one after the other, each with its
whole budget, until one of them raises:

- `retry`: `RetryExhaustionMachine` under Hypothesis (`machine_settings`: the `ci` budget by
  default, 300 examples of 70 steps);
- `lifecycle`: `RunLifecycleMachine` under Hypothesis (same; 400 examples of 100 steps);
- `exhaustive`: the small-scope explorer (`model_tests.exhaustive.explore`, its whole scope);
- `workflow`: `WorkflowMachine` (SPEC §4) under Hypothesis (`workflow_settings`: the `ci`
  budget, 150 examples of 80 steps), the subject of the Workflow mutants (`aim="workflow"`).
  It is last in `ENGINES`, so an ordinary-Run hunt reaches it only after the explorer.

The order is the mutant's `aim` (the machine whose subject the mutated code is: `retry` for code
that loses or retries Attempts, `lifecycle` for fencing, completion, replays and cancellation),
then the other machine, then the explorer. The aim is a property of the mutated code, fixed in
the registry, not tuned to the results; every engine still runs its whole budget before the
mutant is declared a survivor.

Shrinking is off (`phases` explicit, reuse, generate; no example database): Hypothesis stops at
the first failing example, so the time measured is the time to catch, not to minimise.

What counts as caught, and how it is reported (`Catch.mechanism`):
- `model`: a `ModelViolation` from the models' own checks (`model_tests.harness`,
  `model_tests.oracle`, the machines' scripted expectations, the explorer); `Catch.spec` is the
  SPEC id it names. Checks that evaluate the kernel's invariant predicates I-1..I-9 name RUN-01.
- `icontract`: the kernel's own pre/postconditions (`kernel.contracts`) raised
  `icontract.ViolationError`: the kernel caught itself, a weaker catch. The quality tier then
  hunts again with the models alone (`contracts=False, kernel_predicates=False`: no kernel
  contract, and none of the invariant predicates the models borrow from `kernel.specs`), which
  must catch it too.

Anything else escaping an engine is not a catch and propagates. A mutant that survives every
engine returns `None`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any
from unittest import mock

import icontract
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from kernel.transitions import apply as kernel_apply
from model_tests import exhaustive
from model_tests.harness import STATS, Harness, ModelViolation
from model_tests.machines import (
    ModelMachine,
    RetryExhaustionMachine,
    RunLifecycleMachine,
    machine_settings,
)
from model_tests.quality.mutants import Mutant
from model_tests.workflow_machine import WorkflowMachine, workflow_settings

__all__ = ["CATCHES", "ENGINES", "Catch", "engine_order", "hunt", "quality_settings"]

_SPEC_ID = re.compile(r"^\s*((?:[A-Z]+-R?\d+[a-z]?)|(?:§[\d.]+)|T\d+|A-\d+|V-\d+)\s*:")


@dataclass(frozen=True, slots=True)
class Catch:
    """How one mutant was caught."""

    mutant: str
    contracts: bool  # whether the kernel's icontract checks were on
    kernel_predicates: bool  # whether the models also evaluated kernel.specs I-1..I-9 / V-*
    engine: str  # retry | lifecycle | exhaustive | workflow
    mechanism: str  # model | icontract
    spec: str  # the SPEC id the ModelViolation names, or "contract"
    steps: int  # machine rule steps (explorer: transitions) until the first violation
    seconds: float  # wall time until the first violation, from the start of the hunt
    hunt_seconds: float  # wall time until the engine raised (Hypothesis replays the example)
    message: str  # the first line of the violation

    @property
    def mode(self) -> str:
        if self.contracts and self.kernel_predicates:
            return "as shipped"
        if not self.contracts and not self.kernel_predicates:
            return "models alone"
        return "contracts on" if self.contracts else "contracts off"

    def line(self) -> str:
        return (
            f"{self.mutant:<38} {self.mode:<12}  caught by {self.mechanism}:{self.spec:<9} "
            f"({self.engine}) after {self.steps:>6} steps, {self.seconds:6.2f} s"
        )


# Every catch that `hunt` recorded in this process (the quality tier's terminal summary).
CATCHES: list[Catch] = []


def quality_settings(machine: type[ModelMachine]) -> settings:
    """The machine's budget under the active profile, without shrinking or a database."""
    return settings(
        machine_settings(machine),
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
        database=None,
    )


class _Counter:
    """An engine's progress: machine rule steps (from `STATS`) and explorer transitions (its
    calls of `apply`), and where the hunt was when the first violation was raised.

    The first violation is noted when it is constructed (`ModelViolation` by the models,
    `icontract.ViolationError` by the kernel's contracts): what comes after it, the machine's
    teardown (which drives the last Run on with the same bug) and Hypothesis's replay of the
    failing example, is not part of the time to catch."""

    def __init__(self) -> None:
        self.explorer = 0
        self.start_steps = self._machine_steps()
        self.started = time.perf_counter()
        self.first: tuple[int, float] | None = None

    @staticmethod
    def _machine_steps() -> int:
        machines = (RetryExhaustionMachine, RunLifecycleMachine, WorkflowMachine)
        return sum(STATS.of(m.NAME).steps for m in machines)

    def steps(self) -> int:
        return self._machine_steps() - self.start_steps + self.explorer

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    @contextmanager
    def watching(self) -> Iterator[None]:
        """Note the progress when the first violation is constructed."""
        with ExitStack() as stack:
            for cls in (ModelViolation, icontract.ViolationError):
                real = cls.__init__

                def noting(exc: BaseException, *args: Any, _real: Any = real, **kw: Any) -> None:
                    if self.first is None:
                        self.first = (self.steps(), self.elapsed())
                    _real(exc, *args, **kw)

                stack.enter_context(mock.patch.object(cls, "__init__", noting))
            yield

    @contextmanager
    def counting_explorer(self) -> Iterator[None]:
        def counted(*args: Any) -> Any:
            self.explorer += 1
            return kernel_apply(*args)

        with mock.patch.object(exhaustive, "apply", counted):
            yield


def _machine(machine: type[ModelMachine]) -> Callable[[_Counter], None]:
    def run(counter: _Counter) -> None:
        run_state_machine_as_test(machine, settings=quality_settings(machine))

    return run


def _explore(counter: _Counter) -> None:
    with counter.counting_explorer():
        exhaustive.explore()


def _workflow(counter: _Counter) -> None:
    budget = settings(
        workflow_settings(), phases=(Phase.explicit, Phase.reuse, Phase.generate), database=None
    )
    run_state_machine_as_test(WorkflowMachine, settings=budget)


ENGINES: tuple[tuple[str, Callable[[_Counter], None]], ...] = (
    ("retry", _machine(RetryExhaustionMachine)),
    ("lifecycle", _machine(RunLifecycleMachine)),
    ("exhaustive", _explore),
    ("workflow", _workflow),
)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def _first_raised(exc: BaseException) -> BaseException:
    """The catch that was raised first. Hypothesis runs a machine's `teardown` in a `finally`,
    so a violation in a step can be followed by a second one from the teardown (which drives
    the last Run on with the same bug); the first is its `__context__`."""
    first = exc
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModelViolation | icontract.ViolationError):
            first = current
        current = current.__context__
    return first


def engine_order(mutant: Mutant) -> tuple[str, ...]:
    """The mutant's `aim` first, then the other engines in `ENGINES` order."""
    names = tuple(name for name, _ in ENGINES)
    if mutant.aim not in names:
        raise ValueError(f"{mutant.name}: unknown engine {mutant.aim!r}")
    return (mutant.aim, *(name for name in names if name != mutant.aim))


def _no_checks(*args: object) -> int:
    return 0


def _no_violations(*args: object) -> list[object]:
    return []


@contextmanager
def _without_kernel_predicates() -> Iterator[None]:
    """The models without the predicates they borrow from `kernel.specs` and
    `kernel.contracts` (the RUN-01 invariant of the machines; the explorer's per-state and
    per-step checks), leaving only the checks written in `model_tests`."""
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(Harness, "check_kernel_invariants", _no_checks))
        # The Workflow model's use of `check_workflow_invariants` / `workflow_step_violations`.
        stack.enter_context(mock.patch.object(WorkflowMachine, "KERNEL_PREDICATES", False))
        for name in ("check_invariants", "step_violations", "i5_finality"):
            stack.enter_context(mock.patch.object(exhaustive, name, _no_violations))
        yield


def hunt(
    mutant: Mutant,
    *,
    contracts: bool = True,
    kernel_predicates: bool = True,
    engines: Sequence[str] | None = None,
    record: bool = True,
) -> Catch | None:
    """Run the engines (`engine_order(mutant)`, or the given ones in that order) against
    `mutant`, each with its whole budget, until one catches it; `None` if it survives them
    all. `contracts=False` switches the kernel's icontract checks off, `kernel_predicates=False`
    the models' use of the kernel's invariant predicates. A catch is appended to `CATCHES` when
    `record`."""
    counter = _Counter()
    runners = dict(ENGINES)
    chosen = [(name, runners[name]) for name in (engines or engine_order(mutant))]
    with ExitStack() as stack:
        stack.enter_context(mutant.applied(contracts=contracts))
        if not kernel_predicates:
            stack.enter_context(_without_kernel_predicates())
        stack.enter_context(counter.watching())
        for engine, run in chosen:
            try:
                run(counter)
            except (ModelViolation, icontract.ViolationError) as raised:
                exc = _first_raised(raised)
            else:
                continue
            message = _first_line(exc)
            if isinstance(exc, ModelViolation):
                found = _SPEC_ID.match(message)
                mechanism, spec = "model", found.group(1) if found else "?"
            else:
                mechanism, spec = "icontract", "contract"
            hunt_seconds = counter.elapsed()
            steps, seconds = counter.first or (counter.steps(), hunt_seconds)
            catch = Catch(
                mutant=mutant.name,
                contracts=contracts,
                kernel_predicates=kernel_predicates,
                engine=engine,
                mechanism=mechanism,
                spec=spec,
                steps=steps,
                seconds=seconds,
                hunt_seconds=hunt_seconds,
                message=message,
            )
            if record:
                CATCHES.append(catch)
            return catch
    return None
