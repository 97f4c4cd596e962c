"""Record a trace by running commands against the reference adapter (the oracle)."""

from __future__ import annotations

import dataclasses

from conformance.run.adapter import APPROVED_ACTION, WORKFLOW, ReferenceAdapter, StepResult
from conformance.run.faults import FAULTS_CAPABILITY, Fault
from conformance.run.pages import PageRequest
from conformance.run.trace import (
    AnyCommand,
    Expectation,
    Step,
    TokenNames,
    Trace,
    TraceCommand,
    TraceHeader,
    decode_trace_command,
    encode_trace_command,
    projection_digest,
)
from kernel import Rejected
from kernel.approved_action import ACTION_COMMANDS_BY_NAME, is_action_command
from kernel.workflow import is_workflow_command


class Recorder:
    """Applies commands to a fresh reference store and keeps every step with its full
    expectation (outcome kind, code and the projection after the step)."""

    def __init__(self, header: TraceHeader, names: TokenNames | None = None) -> None:
        self.header = header
        self.names = names if names is not None else TokenNames()
        self.adapter = ReferenceAdapter()
        self.steps: list[Step] = []
        self.capabilities: set[str] = set(header.capabilities)

    def _note_fault(self, fault: Fault | None) -> None:
        """M-3: a trace with an injected fault needs the `faults` capability; a runner without
        it reports the trace not applicable instead of failing a step it cannot fault."""
        if fault is not None:
            self.capabilities.add(FAULTS_CAPABILITY)

    def step(
        self, command: AnyCommand | None, observed_at_ms: int, fault: Fault | None = None
    ) -> StepResult:
        self._note_fault(fault)
        if command is not None and is_workflow_command(command):
            # SPEC §7: a Workflow step needs a store that persists Workflows (§4.1).
            self.capabilities.add(WORKFLOW)
        if command is not None and is_action_command(command):
            # SPEC §5 (issue 19): an approval step needs a store with the approval domain.
            self.capabilities.add(APPROVED_ACTION)
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

    def raw(
        self, command: TraceCommand, observed_at_ms: int, fault: Fault | None = None
    ) -> StepResult:
        """A step given as the trace carries it, e.g. a command that strict decoding refuses
        (A-1: a Run command with a retry policy never reaches the store)."""
        decoded = decode_trace_command(command)
        if not isinstance(decoded, Rejected):
            return self.step(decoded, observed_at_ms, fault)
        self._note_fault(fault)
        if command.name in ACTION_COMMANDS_BY_NAME:
            self.capabilities.add(APPROVED_ACTION)
        projection = self.adapter.project()
        result = StepResult(decoded.kind.value, decoded.code.value)
        self.steps.append(
            Step(
                step=len(self.steps) + 1,
                command=command,
                observed_at_ms=observed_at_ms,
                expect=Expectation(
                    result.kind, result.code, projection, projection_digest(projection)
                ),
                fault=fault,
            )
        )
        return result

    def page(
        self, request: PageRequest, observed_at_ms: int, fault: Fault | None = None
    ) -> StepResult:
        """A page step: a source query or a lost-retry page; the trace's header then names the
        capability it needs (a runner without it reports the trace not applicable)."""
        self._note_fault(fault)
        result = self.adapter.page(request, observed_at_ms, fault)
        projection = self.adapter.project()
        self.capabilities.add(request.capability)
        self.steps.append(
            Step(
                step=len(self.steps) + 1,
                command=None,
                observed_at_ms=observed_at_ms,
                expect=Expectation(
                    result.kind,
                    result.code,
                    projection,
                    projection_digest(projection),
                    result.page,
                ),
                fault=fault,
                page=request,
            )
        )
        return result

    def trace(self) -> Trace:
        header = dataclasses.replace(self.header, capabilities=tuple(sorted(self.capabilities)))
        return Trace(header, tuple(self.steps))
