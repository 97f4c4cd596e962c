"""Repository-wide pytest setup: Hypothesis profiles and SPEC traceability.

Hypothesis profiles (selected by the environment variable `QL3_HYPOTHESIS_PROFILE`, default "ci";
`--hypothesis-profile NAME` on the command line still wins):
- "ci": derandomized (deterministic), 100 examples, no deadline, prints reproduction blobs.
- "dev": as "ci" but randomized.
- "deep": 5000 examples, no deadline, randomized.

Traceability (SPEC §0.2: tests cite property ids with `@pytest.mark.spec("RUN-01", ...)`):
- At collection every id in a `spec` marker must be registered in
  `kernel.specs.properties.PROPERTIES`; an unknown id (or an empty marker) is a usage error.
- After a run of the whole default suite (no arguments, or paths that cover every configured
  `testpaths` entry; no node ids, `-k`, `-m`, `--deselect`, `--lf` or `--sw`) that was not
  stopped early by `-x` or `--maxfail`, every id of `required_ids(CURRENT_ISSUE)` must be cited by
  at least one test that ran and passed (skipped and xfailed tests do not count). Otherwise the
  missing ids are listed and the run fails.
- `--no-spec-trace` turns the coverage gate off (marker ids are still validated).
  The developer loop `pytest -m "not slow"` is such a partial run: it is never failed for ids that
  only the slow tiers cite.

Slow tiers (marker `slow`, registered in pyproject.toml): each module marks its own with
`pytestmark` or a decorator.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis.errors import InvalidArgument

from kernel.specs.properties import CURRENT_ISSUE, PROPERTIES, required_ids

settings.register_profile(
    "ci",
    derandomize=True,
    # No example database: a failure saved by an earlier run (a planted-bug run in the same
    # folder, another collection) would be replayed first and decide what a later run catches
    # (decision TS-3). `print_blob` still reproduces any failure.
    database=None,
    max_examples=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev",
    derandomize=False,
    max_examples=100,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("deep", max_examples=5000, deadline=None, derandomize=False)

_PROFILE_ENV = "QL3_HYPOTHESIS_PROFILE"
_PROPERTY_NAME = "spec_ids"  # the user_properties key that carries a test's ids into its reports


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--no-spec-trace",
        action="store_true",
        default=False,
        help="do not fail a full run when a required SPEC property id has no passing test "
        "(ids in spec markers are still validated)",
    )


def pin_local_constants() -> None:
    """Make Hypothesis's pool of "local constants" empty for the rest of the process (TS-3).

    Besides its random draws, Hypothesis now and then (p = 0.05 per draw) returns a literal
    constant found in the source of the project's modules loaded so far, a pool it grows as
    `sys.modules` grows. The derandomized `ci` profile's draws then depend on which modules
    were imported before a test ran: collecting one more test module changed the lifecycle
    machine's walk (the same planted bug was caught by the lifecycle model after 11,207 steps
    alone and only by the exhaustive explorer, after 109,177, in the full suite). The pool is
    private API; a Hypothesis without it has nothing to pin."""
    from hypothesis.internal.conjecture import providers  # noqa: PLC0415

    pool = getattr(providers, "_local_constants", None)
    if pool is None or not hasattr(providers, "_get_local_constants"):
        return
    empty = copy.deepcopy(pool)
    for values in (empty.integers, empty.floats, empty.bytes, empty.strings):
        values.clear()
    providers._get_local_constants = lambda: empty


def pytest_configure(config: pytest.Config) -> None:
    name = os.environ.get(_PROFILE_ENV, "ci")
    try:
        settings.load_profile(name)
    except InvalidArgument as exc:
        raise pytest.UsageError(f"{_PROFILE_ENV}={name!r} is not a Hypothesis profile") from exc
    if settings.get_profile(name).derandomize:
        pin_local_constants()
    config.pluginmanager.register(_SpecTrace(config), "ql3-spec-trace")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        ids: set[str] = set()
        for marker in item.iter_markers("spec"):
            if not marker.args:
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.spec needs at least one id")
            for pid in marker.args:
                if not isinstance(pid, str) or pid not in PROPERTIES:
                    raise pytest.UsageError(
                        f"{item.nodeid}: unknown SPEC property id {pid!r} in @pytest.mark.spec"
                    )
                ids.add(pid)
        if ids:
            # user_properties travel with every report (also across pytest-xdist workers).
            item.user_properties.append((_PROPERTY_NAME, " ".join(sorted(ids))))


def _is_full_run(config: pytest.Config) -> bool:
    """True when the whole default suite was selected (see the module docstring)."""
    option = config.option
    narrowing = (
        getattr(option, "keyword", ""),
        getattr(option, "markexpr", ""),
        getattr(option, "deselect", None),
        getattr(option, "lf", False),
        getattr(option, "stepwise", False),
    )
    if any(narrowing):
        return False
    if config.args_source == pytest.Config.ArgsSource.TESTPATHS:
        return True
    if any("::" in arg for arg in config.args):
        return False
    # Explicit paths count as a full run when they cover every configured test path.
    chosen = [Path(arg).resolve() for arg in config.args]
    testpaths = [(config.rootpath / p).resolve() for p in config.getini("testpaths")]
    if not testpaths:
        testpaths = [config.rootpath.resolve()]
    return all(any(c == t or c in t.parents for c in chosen) for t in testpaths)


class _SpecTrace:
    """Per-session traceability state; registered as a plugin by `pytest_configure`."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.passed: dict[str, frozenset[str]] = {}  # nodeid -> ids of a passing call phase
        self.failed: set[str] = set()  # nodeids with any failed phase
        self.result: tuple[int, int, frozenset[str]] | None = None
        self.partial: str | None = None  # why coverage was not judged

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.failed.add(report.nodeid)
        elif report.when == "call" and report.passed and not hasattr(report, "wasxfail"):
            ids = frozenset(
                pid
                for key, value in report.user_properties
                if key == _PROPERTY_NAME and isinstance(value, str)
                for pid in value.split()
            )
            self.passed[report.nodeid] = ids

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        config = self.config
        if config.getoption("no_spec_trace") or hasattr(config, "workerinput"):
            return
        if exitstatus == pytest.ExitCode.INTERRUPTED:
            return
        if not _is_full_run(config):
            self.partial = "partial test selection"
            return
        if session.shouldfail or session.shouldstop:
            # Stopped early (`-x`, `--maxfail`): the failure that stopped it is the report; the
            # ids of the tests that never ran would only bury it.
            self.partial = "the run stopped early"
            return
        covered: set[str] = set()
        for nodeid, ids in self.passed.items():
            if nodeid not in self.failed:  # a failed setup/teardown voids a passing call
                covered |= ids
        required = required_ids(CURRENT_ISSUE)
        missing = required - covered
        self.result = (len(required) - len(missing), len(required), missing)
        if missing and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.partial:
            terminalreporter.write_line(f"spec traceability: not checked ({self.partial})")
        if self.result is None:
            return
        covered, required, missing = self.result
        if missing:
            terminalreporter.section("spec traceability", red=True)
            terminalreporter.write_line(
                f"required SPEC property ids (issue <= {CURRENT_ISSUE}) without a passing test:"
            )
            for pid in sorted(missing):
                prop = PROPERTIES[pid]
                terminalreporter.write_line(f"  {pid} (issue {prop.issue}): {prop.statement}")
        terminalreporter.write_line(
            f"spec traceability: {covered}/{required} required ids covered", red=bool(missing)
        )
