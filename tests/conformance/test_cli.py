"""`qlk` and the pytest plugin: exit statuses, the summary, JUnit, the readable trace view, and
one test per trace through `pytest --ql3-runner` (issue 4, items 4 and 5; exercised here on the
reference adapter, and on the edge runner in tests/runners/edge)."""

from __future__ import annotations

import importlib
import io
import json
import os
import shutil
import subprocess
import sys
import types
import xml.etree.ElementTree as ET
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import ExitCode, main
from conformance.cli import conform as conform_command
from conformance.journal.trace import JOURNAL_CORPUS
from conformance.run import factories
from conformance.run.corpus import RUN_CORPUS, read_text, read_trace
from conformance.run.guards import GuardReport, GuardWrite
from conformance.run.trace import canonical, projection_digest

# The reference adapter without the cluster recovery source, importable by a child process.
LACKING = "tests.support.adapters:WithoutClusterRecovery"
SOME = (
    "RETRY-07-retry-wait-not-before-due.jsonl",
    "LEASE-02-each-mismatched-fence-field-rejected.jsonl",
    "REC-01-cluster-source-selects-exactly-the-candidates.jsonl",
)


def corpus(tmp_path: Path, *, tamper: bool = False) -> Path:
    """A small trace directory; with `tamper`, one step of one trace expects a wrong status."""
    root = tmp_path / "traces"
    root.mkdir()
    for name in SOME:
        shutil.copy(RUN_CORPUS / name, root / name)
    if tamper:
        target = root / SOME[0]
        lines = read_text(target).splitlines()
        step = json.loads(lines[3])
        step["expect"]["projection"]["runs"][0]["status"] = "running"
        step["expect"]["digest"] = projection_digest(step["expect"]["projection"])
        lines[3] = canonical(step)
        target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def row(out: str, label: str) -> str:
    """The value of one row of the summary table."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 2 and cells[0] == label:
            return cells[1]
    raise AssertionError(f"no row {label!r} in:\n{out}")


def test_conform_passes_prints_the_summary_and_writes_junit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "report.xml"
    status = main(
        [
            "conform",
            "--runner",
            "reference",
            "--traces",
            str(corpus(tmp_path)),
            "--junit",
            str(junit),
        ]
    )
    out = capsys.readouterr()
    assert status == 0
    assert row(out.out, "passed") == "3"
    assert row(out.out, "diverged") == "0"
    assert row(out.out, "properties covered") == "3 of 3 named"
    assert "100% 3/3 traces" in out.err  # progress on a pipe: one line per 10 %
    # kill mode cannot run on an in-memory store, and a PASS says so (issue 16 item 4)
    assert out.out.splitlines()[-1] == "verdict: PASS; kill mode did not run"
    assert "kill mode: did not run: the reference store lives in memory" in out.out
    suite = ET.parse(junit).getroot()
    # the three traces, then guard mode (the reference store can be probed), then kill mode
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("5", "0", "1")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases][-2:] == ["guard mode", "kill mode"]
    skipped = cases[-1].find("skipped")
    assert skipped is not None
    assert (skipped.get("message") or "").startswith("did not run: the reference store")


def test_a_guard_finding_fails_the_junit_file_as_it_fails_the_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 16 item 3: guard (and kill) results are in the JUnit file, so its failure count
    matches the exit code, and the last line says why the run failed."""
    accepted = GuardWrite("t", 1, "grant_lease", "applied", 3, accepted=("stale accepted",))
    monkeypatch.setattr(conform_command, "probe_every_write", lambda *_: GuardReport((accepted,)))
    junit = tmp_path / "report.xml"
    argv = ["conform", "--runner", "reference", "--traces", str(corpus(tmp_path)), "-q"]
    assert main([*argv, "--junit", str(junit), "--no-kill"]) == 1
    out = capsys.readouterr().out
    assert out.splitlines()[-1] == "verdict: FAIL (guard mode: 1 findings)"
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures")) == ("4", "1")
    failure = suite.find("testcase[@name='guard mode']/failure")
    assert failure is not None
    assert "1 accepted by the runner" in (failure.get("message") or "")
    assert failure.text == "stale accepted"


def test_a_divergence_exits_1_with_the_step_and_the_diff(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "report.xml"
    root = corpus(tmp_path, tamper=True)
    status = main(
        ["conform", "--runner", "reference", "--traces", str(root), "--junit", str(junit)]
    )
    out = capsys.readouterr().out
    assert status == 1
    assert "RETRY-07-retry-wait-not-before-due: step 3 (acknowledge_starting) diverged" in out
    assert "runs[r1].status: expected 'running', got 'dispatching'" in out
    failures = ET.parse(junit).getroot().findall("testcase/failure")
    assert len(failures) == 1
    assert "step 3" in (failures[0].text or "")


def test_a_missing_capability_is_reported_not_applicable_never_passed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "report.xml"
    spec = LACKING
    status = main(
        ["conform", "--runner", spec, "--traces", str(corpus(tmp_path)), "--junit", str(junit)]
    )
    out = capsys.readouterr().out
    assert status == 0
    assert row(out, "not applicable") == "1"
    assert "runner lacks: cluster_recovery (1)" in out
    # the verdict names what the skipped trace needed, so a PASS never hides it (issue 16 item 3)
    assert out.splitlines()[-1] == (
        "verdict: PASS; kill mode did not run; "
        "1 traces not applicable (runner lacks: cluster_recovery (1))"
    )
    assert f"kill mode: did not run: {spec} is not a built-in runner" in out
    assert row(out, "properties covered") == "2 of 3 named"
    skipped = ET.parse(junit).getroot().findall("testcase/skipped")
    messages = [s.get("message") or "" for s in skipped]
    assert messages[0] == "not applicable: needs cluster_recovery"
    assert messages[1].startswith("did not run: ")  # kill mode
    assert len(messages) == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["conform", "--runner", "nope"], "use edge, cluster, reference or package.module:factory"),
        (["conform", "--runner", "no_such_module:make"], "cannot import no_such_module"),
        (["conform", "--runner", "conformance.cli:nothing"], "has no callable 'nothing'"),
        (["conform", "--traces", "/nonexistent/dir"], "--traces /nonexistent/dir: no such"),
        (["conform", "--traces", __file__], f"--traces {__file__}: not a directory"),
        (["conform", "--jobs", "0"], "--jobs must be 1 or more"),
        (["conform", "--jobs", "x"], "argument --jobs: invalid int value: 'x'"),
        (["conform", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["no-such-command"], "invalid choice: 'no-such-command'"),
        (["traces", "show", "/nonexistent.jsonl"], "/nonexistent.jsonl: no such trace file"),
    ],
)
def test_bad_usage_exits_2_with_one_line_saying_what_to_fix(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == ExitCode.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("qlk: ")
    assert message in err[0]


def test_cluster_without_a_dsn_says_how_to_give_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(factories.BUILTIN, "cluster", "conformance.run.adapter:ReferenceAdapter")
    with pytest.raises(factories.FactoryError, match="pass --dsn or set QL3_PG_DSN"):
        factories.resolve("cluster", dsn=None)


def test_traces_show_lists_each_step_with_what_it_changed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = RUN_CORPUS / "RETRY-17-local-candidate-error-counted-page-continues.jsonl"
    assert main(["traces", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "RETRY-17-local-candidate-error-counted-page-continues  [run, profile edge"
    )
    assert "   1 t=1000000 admit_run r1 r1-a1: applied admitted" in out
    assert "runs[r1].status: 'queued' -> 'dispatching'" in out
    assert "pass lost_retry_page -> {'errored': 1, 'failed': 2, 'scanned': 3}" in out
    assert "[io_error]" in out


def test_the_pytest_plugin_gives_one_test_per_trace(tmp_path: Path) -> None:
    root = corpus(tmp_path, tamper=True)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "--ql3-runner",
            LACKING,
            "--ql3-traces",
            str(root),
            "-rs",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**_env(), "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    out = run.stdout
    assert run.returncode == 1, out
    # Two traces (one tampered, one needing a missing capability) plus guard mode, which the
    # reference adapter supports and passes.
    assert "1 failed, 2 passed, 1 skipped" in out
    assert "step 3 (acknowledge_starting) diverged" in out
    assert "not applicable: needs cluster_recovery" in out


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}


# -- the exit-code contract of SPEC E-7: every error path of conform and traces ---------------
def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a failure prints on stderr (no traceback, nothing else)."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("qlk: ")
    assert "Traceback" not in err[0]
    return err[0]


def malformed(root: Path) -> Path:
    """A trace directory holding one good trace and one whose header has an unknown member."""
    root.mkdir()
    shutil.copy(RUN_CORPUS / SOME[0], root / SOME[0])
    bad = root / "zz-bad.jsonl"
    bad.write_text('{"bad": 1}\n', encoding="utf-8")
    return bad


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_malformed_trace_exits_2_naming_the_file(
    jobs: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = malformed(tmp_path / "traces")
    argv = ["conform", "--runner", "reference", "--traces", str(bad.parent), "-q", "--jobs", jobs]
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert line == f"qlk: {bad}: malformed trace: line 1: bad: unknown header member"


BAD_COMMANDS = [
    ({"name": "admit_runn"}, "command.name: unknown command name"),
    ({"args": {"run_id": 17}}, "command.args.run_id: must be a string"),
]


@pytest.mark.parametrize(("edit", "message"), BAD_COMMANDS)
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_bad_command_in_a_trace_is_a_trace_error_not_a_divergence(
    jobs: str,
    edit: dict[str, Any],
    message: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A command the codec cannot decode is the trace's fault: exit 2 naming the file, the line
    and the field, before the runner is blamed with a divergence (E-7, issue 16 item 3)."""
    root = corpus(tmp_path)
    target = root / SOME[0]
    lines = read_text(target).splitlines()
    number = next(i for i, line in enumerate(lines) if json.loads(line).get("command"))
    step = json.loads(lines[number])
    step["command"] = {
        **step["command"],
        "name": edit.get("name", step["command"]["name"]),
        "args": {**step["command"]["args"], **edit.get("args", {})},
    }
    lines[number] = canonical(step)
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    argv = ["conform", "--runner", "edge", "--traces", str(root), "-q", "--jobs", jobs]
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert line == f"qlk: {target}: malformed trace: line {number + 1}: {message}"


def test_a_corrupt_gzip_trace_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "traces"
    root.mkdir()
    bad = root / "broken.jsonl.gz"
    bad.write_bytes(b"not gzip at all")
    assert main(["conform", "--runner", "reference", "--traces", str(root), "-q"]) == 2
    assert one_error_line(capsys).startswith(f"qlk: {bad}: cannot read the trace: ")
    assert main(["traces", "show", str(bad)]) == 2
    assert one_error_line(capsys).startswith(f"qlk: {bad}: cannot read the trace: ")


def test_traces_show_of_a_malformed_trace_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = malformed(tmp_path / "traces")
    assert main(["traces", "show", str(bad)]) == 2
    line = one_error_line(capsys)
    assert line == f"qlk: {bad}: malformed trace: line 1: bad: unknown header member"


def test_a_malformed_journal_trace_exits_2_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "traces"
    root.mkdir()
    good = JOURNAL_CORPUS / "INBOX-21-of-two-competing-owners-exactly-one-acquires.jsonl"
    shutil.copy(good, root / good.name)
    bad = root / "zz-bad.jsonl"
    bad.write_text('{"bad": 1}\n', encoding="utf-8")
    argv = ["conform", "--component", "journal", "--journal-adapter", "file"]
    assert main([*argv, "--traces", str(root), "-q"]) == 2
    assert one_error_line(capsys).startswith(f"qlk: {bad}: malformed trace: line 1: ")


def test_an_unwritable_junit_target_exits_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("", encoding="utf-8")
    junit = blocker / "report.xml"  # its directory is a file
    argv = ["conform", "--runner", "reference", "--traces", str(corpus(tmp_path)), "-q"]
    assert main([*argv, "--junit", str(junit), "--no-guards"]) == 2
    assert one_error_line(capsys).startswith(f"qlk: --junit {junit}: cannot write the report")
    # refused before the run: nothing was replayed (issue 16 item 3)
    assert main([*argv, "--junit", str(junit)]) == 2
    assert capsys.readouterr().out == ""
    assert main([*argv, "--junit", str(tmp_path)]) == 2  # a directory
    assert "it is a directory" in capsys.readouterr().err


def raising_module(monkeypatch: pytest.MonkeyPatch) -> str:
    """A runner module (importable in this process) whose factory raises."""
    module = types.ModuleType("qlk_test_raising_runner")

    def make() -> object:
        raise RuntimeError("no database today\nsecond line")

    module.make = make  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return f"{module.__name__}:make"


def test_a_runner_factory_that_raises_exits_3_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = raising_module(monkeypatch)
    assert main(["conform", "--runner", spec, "--traces", str(corpus(tmp_path)), "-q"]) == 3
    assert one_error_line(capsys) == (
        f"qlk: --runner {spec}: the adapter factory raised RuntimeError: no database today"
    )


def test_debug_prints_the_traceback_and_keeps_the_exit_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = raising_module(monkeypatch)
    argv = ["conform", "--runner", spec, "--traces", str(corpus(tmp_path)), "-q"]
    for debug in (["--debug", *argv], [*argv, "--debug"]):  # before or after the command
        assert main(debug) == 3
        err = capsys.readouterr().err
        assert err.startswith("Traceback (most recent call last):")
        assert "RuntimeError: no database today" in err
        assert err.splitlines()[-1].startswith(f"qlk: --runner {spec}: the adapter factory")


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import qlk_no_such_dependency_xyz\n", (3, "cannot import qlk_runner_under_test")),
        ("raise RuntimeError('broken at import')\n", (3, "importing it raised RuntimeError")),
        ("", (2, "has no callable 'make'")),
    ],
)
def test_a_runner_module_that_cannot_load_says_why(
    source: str,
    expected: tuple[int, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A module that exists but needs a missing dependency, or raises on import, is exit 3 (the
    environment); a module without the factory is exit 2 (the flag is wrong)."""
    (tmp_path / "qlk_runner_under_test.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "qlk_runner_under_test", raising=False)
    code, says = expected
    assert main(["conform", "--runner", "qlk_runner_under_test:make"]) == code
    line = one_error_line(capsys)
    assert line.startswith("qlk: --runner 'qlk_runner_under_test:make': ")
    assert says in line


def test_runner_cluster_without_psycopg_exits_3_naming_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "psycopg", None)  # import psycopg raises ImportError
    monkeypatch.delitem(sys.modules, "conformance.run.local_server", raising=False)
    argv = ["conform", "--runner", "cluster", "--traces", str(corpus(tmp_path))]
    assert main([*argv, "--dsn", "postgresql://postgres@127.0.0.1:5432/test"]) == 3
    assert one_error_line(capsys) == (
        "qlk: --runner cluster needs psycopg, which is not installed: "
        "pip install 'ql3-kernel[cluster]'"
    )


def test_an_unreachable_database_exits_3_naming_the_dsn_without_its_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dsn = "postgresql://postgres:hunter2@127.0.0.1:1/test"  # nothing listens on port 1
    argv = ["conform", "--runner", "cluster", "--traces", str(corpus(tmp_path)), "--dsn", dsn]
    assert main(argv) == 3
    out, err = capsys.readouterr()
    assert out == ""  # refused before any output
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        "qlk: --dsn postgresql://postgres:***@127.0.0.1:1/test: the database does not answer: "
        "OperationalError: "
    )
    assert "hunter2" not in err


def test_no_postgresql_anywhere_exits_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    local_server = importlib.import_module("conformance.run.local_server")

    def nothing(*args: object, **kwargs: object) -> None:
        raise local_server.NoPostgresError("no throwaway server could be started")

    monkeypatch.setattr(local_server, "ensure_dsn", nothing)
    assert main(["conform", "--runner", "cluster", "--traces", str(corpus(tmp_path))]) == 3
    assert one_error_line(capsys) == ("qlk: --runner cluster: no throwaway server could be started")


def test_an_interrupt_exits_130_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(conform_command, "run_corpus", interrupted)
    argv = ["conform", "--runner", "reference", "--traces", str(corpus(tmp_path)), "-q"]
    assert main(argv) == 130
    assert one_error_line(capsys) == "qlk: interrupted"


def test_an_unexpected_error_exits_3_with_one_line_and_a_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ValueError("a bug\nwith a second line")

    monkeypatch.setattr(conform_command, "run_corpus", broken)
    argv = ["conform", "--runner", "reference", "--traces", str(corpus(tmp_path)), "-q"]
    assert main(argv) == 3
    assert one_error_line(capsys) == (
        "qlk: unexpected error: ValueError: a bug (run with --debug for the traceback)"
    )


def test_version_help_and_no_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"qlk {metadata.version('ql3-kernel')}"
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "exit status (every command, SPEC E-7):" in text
    for code in ("  0    success", "  1    a check failed", "  2    usage or bad input"):
        assert code in text
    assert "  3    runtime or infrastructure error" in text
    assert "  130  interrupted" in text
    assert main([]) == 2  # no command: the help, on stderr
    out, err = capsys.readouterr()
    assert (out, err.startswith("usage: qlk")) == ("", True)
    assert main(["traces"]) == 2  # a group without its action: the group's help
    assert capsys.readouterr().err.startswith("usage: qlk traces")


def test_the_summary_on_a_pipe_is_the_ascii_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Off a terminal the rich table keeps the plain `| label | value |` layout, byte for byte
    what scripts and the README's tests read (only the time varies)."""
    out = io.StringIO()
    argv = ["conform", "--runner", "reference", "--traces", str(corpus(tmp_path)), "-q"]
    assert main([*argv, "--no-guards"], out=out) == 0
    lines = out.getvalue().splitlines()
    traces = [read_trace(RUN_CORPUS / name) for name in SOME]
    steps = sum(len(t.steps) for t in traces)
    faults = sum(1 for t in traces for s in t.steps if s.fault is not None)
    assert lines[1:11] == [
        "+--------------------+------------------------+",
        "| runner             |              reference |",
        "| traces             |                      3 |",
        "|   passed           |                      3 |",
        "|   not applicable   |                      0 |",
        "|   diverged         |                      0 |",
        f"| steps replayed     | {steps:>22} |",
        f"| faults injected    | {faults:>22} |",
        "| properties covered |           3 of 3 named |",
        "|   not applicable   |                      0 |",
    ]
    assert lines[11].startswith("| time               |")
    assert lines[11].endswith(" s |")
    assert lines[12] == lines[1]
    assert "\x1b" not in out.getvalue()
    assert capsys.readouterr().err == ""  # -q: no progress


def test_the_readme_states_every_exit_status() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if line.startswith("| ") and " | " in line]
    statuses = {row.split("|")[1].strip() for row in rows}
    assert {str(int(code)) for code in ExitCode} <= statuses
    assert "`qlk: <message>`" in readme
    assert "`--debug`" in readme
    assert "`qlk --version`" in readme
