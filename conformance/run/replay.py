"""Replay traces against any adapter and report the first divergence (SPEC §7)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from conformance.run.adapter import ConformanceAdapter, StepResult
from conformance.run.faults import FaultKind
from conformance.run.pages import ExpiryPass, LostRetryPass, SourceQuery
from conformance.run.projection import diff
from conformance.run.trace import AnyCommand, Step, Trace, canonical, decode_trace_command
from kernel import Rejected


@dataclass(frozen=True, slots=True)
class Divergence:
    trace: str
    step: int
    command: str
    expected: tuple[str, str | None]
    actual: tuple[str, str | None]
    projection_diff: tuple[str, ...]
    expected_page: dict[str, Any] | None = None
    actual_page: dict[str, Any] | None = None

    def render(self) -> str:
        lines = [
            f"{self.trace}: step {self.step} ({self.command}) diverged",
            f"  expected outcome {self.expected[0]} {self.expected[1] or ''}".rstrip(),
            f"  actual outcome   {self.actual[0]} {self.actual[1] or ''}".rstrip(),
        ]
        if self.expected_page != self.actual_page:
            lines.append(f"  expected page {canonical(self.expected_page)}")
            lines.append(f"  actual page   {canonical(self.actual_page)}")
        lines += [f"  {line}" for line in self.projection_diff[:40]]
        return "\n".join(lines)


@dataclass
class TraceResult:
    name: str
    steps: int = 0
    faults: int = 0
    divergence: Divergence | None = None
    missing_capabilities: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.missing_capabilities:
            return "not_applicable"
        return "diverged" if self.divergence is not None else "passed"


def replay(trace: Trace, make_adapter: Callable[[], ConformanceAdapter]) -> TraceResult:
    """Replay `trace` on a fresh adapter, comparing outcome kind, code and the full projection
    after every step. A trace needing a capability the adapter lacks is `not_applicable`."""
    result = TraceResult(trace.header.name)
    adapter = make_adapter()
    try:
        missing = tuple(c for c in trace.header.capabilities if c not in adapter.capabilities)
        if missing:
            result.missing_capabilities = missing
            return result
        for step in trace.steps:
            try:
                actual = apply_step(adapter, step)
            except Exception as exc:  # a runner failure is a divergence, not a crash of the suite
                actual = StepResult("exception", type(exc).__name__)
            if step.fault is not None:
                result.faults += 1
            changes = diff(step.expect.projection, adapter.project())
            if (
                (step.expect.kind, step.expect.code) != (actual.kind, actual.code)
                or step.expect.page != actual.page
                or changes
            ):
                result.divergence = Divergence(
                    trace=trace.header.name,
                    step=step.step,
                    command=step_label(step),
                    expected=(step.expect.kind, step.expect.code),
                    actual=(actual.kind, actual.code),
                    projection_diff=tuple(changes),
                    expected_page=step.expect.page,
                    actual_page=actual.page,
                )
                return result
            result.steps += 1
        return result
    finally:
        adapter.close()


def step_label(step: Step) -> str:
    """The command name, `query <source>`, `pass lost_retry_page`, `pass lease_expiry_page`
    or `reopen`."""
    if step.command is not None:
        return step.command.name
    if isinstance(step.page, SourceQuery):
        return f"query {step.page.source}"
    if isinstance(step.page, LostRetryPass):
        return "pass lost_retry_page"
    if isinstance(step.page, ExpiryPass):
        return "pass lease_expiry_page"
    return "reopen"


def apply_step(adapter: ConformanceAdapter, step: Step) -> StepResult:
    """Apply one trace step to an adapter exactly as the replayer does."""
    if step.page is not None:
        return adapter.page(step.page, step.observed_at_ms, step.fault)
    command: AnyCommand | None = None
    if step.command is not None:
        decoded = decode_trace_command(step.command)
        if isinstance(decoded, Rejected):
            # Refused by strict decoding: it never reaches the store.
            return StepResult(decoded.kind.value, decoded.code.value)
        command = decoded
    if step.fault is not None and step.fault.kind is FaultKind.REOPEN:
        adapter.reopen()
    return adapter.apply(command, step.observed_at_ms, step.fault)
