"""The quality tier's session report: one line per hunted mutant (`hunt.CATCHES`)."""

from __future__ import annotations

import pytest

from model_tests.quality.hunt import CATCHES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not CATCHES:
        return
    terminalreporter.section("quality tier: planted bugs caught")
    for catch in CATCHES:
        terminalreporter.write_line(catch.line())
    shipped = [c for c in CATCHES if c.mode == "as shipped"]
    terminalreporter.write_line(
        f"{len(shipped)} mutants caught (kernel as shipped) in "
        f"{sum(c.seconds for c in shipped):.1f} s of hunting; "
        f"{sum(1 for c in shipped if c.mechanism == 'model')} first by the models, "
        f"{sum(1 for c in shipped if c.mechanism == 'icontract')} first by the kernel's contracts"
    )
