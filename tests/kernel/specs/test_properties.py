"""The property registry is well formed, and the traceability plugin enforces it.

That the registry lists exactly the SPEC's checklist ids, with their sources and test kinds, is
checked against `../shared/SPEC.md` by `scripts/check_spec_registry.py`, a step of `.ci/run`
run where that file exists (decision SR-1): the README's test command needs nothing outside the
clone. The comparison itself is tested in `tests/scripts/test_check_spec_registry.py`.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kernel.specs import properties
from kernel.specs.properties import CURRENT_ISSUE, KINDS, PROPERTIES, required_ids

pytest_plugins = ("pytester",)

REPO_ROOT = Path(__file__).resolve().parents[3]

ID_PATTERN = re.compile(r"^[A-Z0-9]+-\d+$")


def test_ids_are_well_formed_and_keys_match() -> None:
    for key, prop in PROPERTIES.items():
        assert key == prop.id
        assert ID_PATTERN.fullmatch(prop.id) or prop.id == "S-1", prop.id


def test_no_duplicate_ids_in_the_source_tuple() -> None:
    ids = [prop.id for prop in properties._ALL]
    assert len(ids) == len(set(ids)) == len(PROPERTIES)


def test_fields_are_well_formed() -> None:
    for prop in PROPERTIES.values():
        assert prop.kind, prop.id
        assert prop.kind <= KINDS, prop.id
        assert prop.statement, prop.id
        assert prop.statement.strip() == prop.statement, prop.id
        assert "\n" not in prop.statement, prop.id
        assert prop.source, prop.id
        assert prop.issue in {2, 4, 5, 6, 7, 8, 9}, prop.id


def test_counts_per_family() -> None:
    families: dict[str, int] = {}
    for pid in PROPERTIES:
        family = pid.rsplit("-", 1)[0]
        families[family] = families.get(family, 0) + 1
    assert families == {
        "RUN": 8,
        "LEASE": 12,
        "RETRY": 21,
        "REC": 13,
        "CAD": 18,
        "INBOX": 44,
        "WF": 19,  # §4.10 WF-01..WF-18 and Appendix D WF-19
        "AA": 15,  # §5.6 AA-01..AA-15
        "E": 3,  # Appendix E-1 (a CONF trace), E-2 (the journal lock), E-7 (qlk exit codes)
        "S": 1,
    }


def test_issue_assignment_rules() -> None:
    cluster = {"REC-01", "REC-02", "REC-06", "REC-13", "RETRY-20", "CAD-06", "CAD-07", "CAD-18"}
    cluster.add("E-1")  # its CONF trace runs on both runners
    for pid, prop in PROPERTIES.items():
        family = pid.rsplit("-", 1)[0]
        if pid in cluster:
            expected = 5
        elif family == "INBOX" or pid in {"CAD-15", "E-2"}:  # the inbox's (E-2: its lock)
            expected = 6
        elif family == "WF":
            expected = 8
        elif family == "AA":  # the Approved Action issue
            expected = 9
        elif pid in {"CAD-11", "CAD-12", "CAD-17", "RETRY-19", "S-1"}:
            expected = 2
        elif pid == "CAD-16":
            expected = 4
        elif family == "CAD" or pid in {"RETRY-21", "E-7"}:  # the local application's issue
            expected = 7
        elif "PBT" in prop.kind:
            expected = 2
        else:
            expected = 4
        assert prop.issue == expected, pid


def test_required_ids() -> None:
    assert CURRENT_ISSUE == 9  # Approved Actions (SPEC §5)
    current = required_ids(CURRENT_ISSUE)
    assert {"S-1", "CAD-11", "CAD-12", "RUN-02", "LEASE-02", "RETRY-19"} <= current
    assert {"RUN-06", "RETRY-10", "CAD-16", "REC-09"} <= current
    assert {"REC-01", "REC-02", "REC-06", "REC-13", "RETRY-20", "CAD-06", "CAD-07"} <= current
    assert "CAD-18" in current
    assert "E-1" in current
    assert {f"INBOX-{n:02d}" for n in range(1, 45)} <= current
    assert {"CAD-15", "INBOX-43", "INBOX-44", "E-2"} <= current
    assert {"RETRY-21", "CAD-01", "CAD-13", "CAD-14", "E-7"} <= current
    assert {f"WF-{n:02d}" for n in range(1, 20)} <= current
    assert {f"AA-{n:02d}" for n in range(1, 16)} <= current
    assert not {p for p in required_ids(8) if p.startswith("AA-")}
    assert required_ids(1) == frozenset()
    assert required_ids(9) == frozenset(PROPERTIES)
    for issue in range(1, 10):
        assert required_ids(issue) <= required_ids(issue + 1)
        assert required_ids(issue) == {p for p, v in PROPERTIES.items() if v.issue <= issue}


# --------------------------------------------------------------------------------------------
# The traceability plugin of the root conftest.py, run in a child pytest
# --------------------------------------------------------------------------------------------

_PYPROJECT = """
[tool.pytest.ini_options]
testpaths = ["tests"]
addopts = "-p no:cacheprovider --strict-markers"
markers = ["spec(*ids): SPEC property ids", "slow: a slow tier"]
"""


def _project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    monkeypatch.delenv("QL3_HYPOTHESIS_PROFILE", raising=False)
    pytester.makeconftest((REPO_ROOT / "conftest.py").read_text(encoding="utf-8"))
    pytester.makepyprojecttoml(_PYPROJECT)
    tests = pytester.mkdir("tests")
    (tests / "test_cited.py").write_text(body, encoding="utf-8")


def _citing_all(extra: str = "", exclude: frozenset[str] = frozenset()) -> str:
    ids = ", ".join(repr(pid) for pid in sorted(required_ids(CURRENT_ISSUE) - exclude))
    return f"import pytest\n\n@pytest.mark.spec({ids})\ndef test_all():\n    pass\n{extra}"


def test_plugin_passes_when_every_required_id_passes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    _project(pytester, monkeypatch, _citing_all())
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.OK
    n = len(required_ids(CURRENT_ISSUE))
    result.stdout.fnmatch_lines([f"spec traceability: {n}/{n} required ids covered"])


def test_plugin_fails_a_full_run_with_missing_ids(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = (
        "import pytest\n\n"
        "@pytest.mark.spec('CAD-11')\ndef test_one():\n    pass\n\n"
        "@pytest.mark.spec('CAD-12')\n@pytest.mark.skip(reason='x')\ndef test_skipped():\n"
        "    pass\n\n"
        "@pytest.mark.spec('S-1')\n@pytest.mark.xfail(reason='x')\ndef test_xfail():\n"
        "    assert False\n"
    )
    _project(pytester, monkeypatch, body)
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    n = len(required_ids(CURRENT_ISSUE))
    result.stdout.fnmatch_lines(
        ["*CAD-12 (issue 2)*", "*S-1 (issue 2)*", f"spec traceability: 1/{n} required ids covered"]
    )
    assert "  CAD-11 (issue" not in result.stdout.str()


def test_plugin_can_be_disabled_and_skips_partial_runs(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = (
        "import pytest\n\n@pytest.mark.spec('CAD-11')\ndef test_one():\n    pass\n\n"
        "@pytest.mark.spec('CAD-12')\n@pytest.mark.slow\ndef test_slow():\n    pass\n"
    )
    _project(pytester, monkeypatch, body)
    assert pytester.runpytest_subprocess("--no-spec-trace").ret == pytest.ExitCode.OK
    partial = pytester.runpytest_subprocess("-k", "one")
    assert partial.ret == pytest.ExitCode.OK
    partial.stdout.fnmatch_lines(["spec traceability: not checked (partial test selection)"])
    # The developer loop `-m "not slow"` is partial too: it must not fail for the ids only the
    # slow tiers cite (here every id but CAD-11 is uncited, which fails a full run).
    loop = pytester.runpytest_subprocess("-m", "not slow")
    assert loop.ret == pytest.ExitCode.OK
    loop.assert_outcomes(passed=1, deselected=1)
    loop.stdout.fnmatch_lines(["spec traceability: not checked (partial test selection)"])
    assert pytester.runpytest_subprocess("tests/test_cited.py::test_one").ret == 0


def test_plugin_does_not_judge_a_run_stopped_early(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-x` (the README's fresh-clone check uses it): the failure that stopped the run is the
    report, not a list of every id the unrun tests would have covered."""
    body = _citing_all("\ndef test_broken():\n    assert False\n")
    _project(pytester, monkeypatch, body)
    result = pytester.runpytest_subprocess("-x")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["spec traceability: not checked (the run stopped early)"])
    assert "without a passing test" not in result.stdout.str()
    whole = pytester.runpytest_subprocess()  # without -x the same failure is judged in full
    assert whole.ret == pytest.ExitCode.TESTS_FAILED
    n = len(required_ids(CURRENT_ISSUE))
    whole.stdout.fnmatch_lines([f"spec traceability: {n}/{n} required ids covered"])


def test_plugin_rejects_unknown_ids(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = "import pytest\n\n@pytest.mark.spec('RUN-99')\ndef test_typo():\n    pass\n"
    _project(pytester, monkeypatch, body)
    result = pytester.runpytest_subprocess("--no-spec-trace")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_typo*unknown SPEC property id 'RUN-99'*"])


def test_plugin_voids_a_pass_whose_teardown_fails(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    extra = (
        "\n@pytest.fixture\ndef broken():\n    yield\n    raise RuntimeError('teardown')\n\n"
        "@pytest.mark.spec('CAD-11')\ndef test_teardown(broken):\n    pass\n"
    )
    _project(pytester, monkeypatch, _citing_all(extra, exclude=frozenset({"CAD-11"})))
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    n = len(required_ids(CURRENT_ISSUE))
    result.stdout.fnmatch_lines(
        ["*CAD-11 (issue 2)*", f"spec traceability: {n - 1}/{n} required ids covered"]
    )
