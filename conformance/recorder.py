"""Record a trace by running commands against the reference adapter (the oracle)."""

from __future__ import annotations

from conformance.adapter import ReferenceAdapter, StepResult
from conformance.faults import Fault
from conformance.trace import (
    Expectation,
    Step,
    TokenNames,
    Trace,
    TraceHeader,
    encode_trace_command,
    projection_digest,
)
from kernel import Command


class Recorder:
    """Applies commands to a fresh reference store and keeps every step with its full
    expectation (outcome kind, code and the projection after the step)."""

    def __init__(self, header: TraceHeader, names: TokenNames | None = None) -> None:
        self.header = header
        self.names = names if names is not None else TokenNames()
        self.adapter = ReferenceAdapter()
        self.steps: list[Step] = []

    def step(
        self, command: Command | None, observed_at_ms: int, fault: Fault | None = None
    ) -> StepResult:
        result = self.adapter.apply(command, observed_at_ms, fault)
        projection = self.adapter.project()
        self.steps.append(
            Step(
                step=len(self.steps) + 1,
                command=None if command is None else encode_trace_command(command, self.names),
                observed_at_ms=observed_at_ms,
                expect=Expectation(
                    result.kind, result.code, projection, projection_digest(projection)
                ),
                fault=fault,
            )
        )
        return result

    def trace(self) -> Trace:
        return Trace(self.header, tuple(self.steps))
