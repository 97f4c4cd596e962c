"""Model-test session report: the step budget and throughput of the model machines.

The counters live in `model_tests.harness.STATS` (steps = rule executions, commands = kernel
commands delivered through the recorder, invariant checks = predicate evaluations). The
budget itself is asserted by `test_models.py::test_ci_budget_runs_at_least_50000_model_steps`;
this hook only prints the totals at the end of the session.
"""

from __future__ import annotations

import pytest

from model_tests.harness import STATS


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not STATS.by_machine:
        return
    terminalreporter.section("model checking")
    for line in STATS.summary().splitlines():
        terminalreporter.write_line(line)
