"""`qlk task add --requires-approval`, `qlk submit` of such a task, `qlk approvals`, `qlk approve`,
`qlk deny`, `qlk status RUN` of a Run still waiting and `qlk serve --approvals` on real SQLite
files (issue 19 item 3): every command's output, and its exit status with the one-line error of
SPEC E-7 (exit 2 for a bad ID, a request already decided otherwise, a bad `--as`; exit 3 for a
database failure)."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from conformance.cli import approvals as approvals_command
from conformance.cli import main
from kernel.approved_action import local_primary_resource_policy
from tests.support.qlk import one_line, qlk, qlk_process

ACTION_ID = re.compile(r"apr-([0-9a-f]{32})")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "ql3.db"


@pytest.fixture
def deploy(db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """A task that requires approval; its command appends a line to `deployed.txt`."""
    status, out, err = qlk(
        capsys, db, "task", "add", "deploy", "--requires-approval", "--cwd", str(tmp_path),
        "--", "sh", "-c", "echo deployed >> deployed.txt",
    )  # fmt: skip
    assert (status, out, err) == (0, "added deploy revision 1\n", "")
    return "deploy"


def requested(capsys: pytest.CaptureFixture[str], db: Path, *extra: str) -> str:
    """`qlk submit --task deploy`: the request's id (stdout alone)."""
    status, out, err = qlk(capsys, db, "submit", "--task", "deploy", *extra)
    assert status == 0, err
    return out.removesuffix("\n")


def json_of(capsys: pytest.CaptureFixture[str], db: Path, *args: str) -> Any:
    status, out, err = qlk(capsys, db, *args, "--json")
    assert (status, err) == (0, ""), err
    return json.loads(out)


def run_of(action_id: str) -> str:
    return "run-" + action_id.removeprefix("apr-")


# -- task add / list -------------------------------------------------------------------------------


def test_a_task_that_requires_approval_is_listed_as_such(
    db: Path, deploy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert qlk(capsys, db, "task", "add", "hello", "--", "true")[0] == 0
    status, out, _ = qlk(capsys, db, "task", "list")
    assert status == 0
    assert re.search(r"\| approval \|", out)
    assert re.search(r"\| deploy \| 1 .*\| required \|", out), out
    assert re.search(r"\| hello  \| 1 .*\| -        \|", out), out
    documents = {d["name"]: d for d in json_of(capsys, db, "task", "list")}
    assert documents["deploy"]["requires_approval"] is True
    assert documents["hello"]["requires_approval"] is False
    # the same definition again is unchanged; without the flag it is the next revision
    args = ["task", "add", "deploy", "--requires-approval", "--cwd", str(db.parent), "--"]
    command = ["sh", "-c", "echo deployed >> deployed.txt"]
    assert qlk(capsys, db, *args, *command)[1] == "deploy unchanged (revision 1)\n"
    assert qlk(capsys, db, "task", "add", "deploy", "--cwd", str(db.parent), "--", *command)[1] == (
        "deploy revision 2\n"
    )
    documents = {d["name"]: d for d in json_of(capsys, db, "task", "list")}
    assert documents["deploy"]["requires_approval"] is False


@pytest.mark.spec("E-7")
def test_approval_with_a_cron_is_refused_naming_the_flag(tmp_path: Path) -> None:
    done = qlk_process(
        tmp_path, "task", "add", "nightly", "--requires-approval", "--cron", "0 3 * * *",
        "--", "true",
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (2, "")
    line = one_line(done.stderr)
    assert line.startswith("qlk: --requires-approval: ")
    assert line.endswith("[TASK_APPROVAL_UNSUPPORTED]")
    assert "--cron" in line
    assert (
        not (tmp_path / "ql3.db").exists()
        or "nightly" not in qlk_process(tmp_path, "task", "list").stdout
    )


@pytest.mark.spec("E-7")
def test_the_cluster_profile_refuses_approval_before_connecting(tmp_path: Path) -> None:
    """Exit 2 naming the flag, not exit 3: nothing answers on port 1, so a connection attempt
    would have failed as infrastructure."""
    done = qlk_process(
        tmp_path, "task", "add", "deploy", "--requires-approval",
        "--dsn", "postgresql://nobody@127.0.0.1:1/none", "--", "./deploy.sh",
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (2, "")
    line = one_line(done.stderr)
    assert line.startswith("qlk: --requires-approval: the cluster profile (--dsn)")
    assert line.endswith("[PROFILE_NOT_SUPPORTED]")


# -- submit ----------------------------------------------------------------------------------------


@pytest.mark.spec("E-7")
def test_submit_prints_the_request_id_alone_and_no_run_exists(tmp_path: Path) -> None:
    """As a shell uses it: `ID=$(qlk submit --task deploy)`; the Run id is on stderr."""
    add = qlk_process(tmp_path, "task", "add", "deploy", "--requires-approval", "--", "true")
    assert add.returncode == 0
    done = qlk_process(tmp_path, "submit", "--task", "deploy", "--as", "carol")
    assert done.returncode == 0
    action_id = done.stdout.removesuffix("\n")
    found = ACTION_ID.fullmatch(action_id)
    assert found is not None, done.stdout
    run_id = f"run-{found.group(1)}"
    assert one_line(done.stderr, prefix=None) == (
        f"deploy: awaiting approval (qlk approve {action_id}); its Run will be {run_id}"
    )
    counts = json.loads(qlk_process(tmp_path, "status", "--json").stdout)
    assert counts["total"] == 0  # a request, not a Run
    shown = qlk_process(tmp_path, "approvals", action_id, "--json")
    document = json.loads(shown.stdout)
    assert (document["status"], document["requested_by"], document["run_id"]) == (
        "pending",
        "carol",
        run_id,
    )
    assert document["run_status"] is None


def test_who_asks_defaults_to_the_os_user(
    db: Path, deploy: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOGNAME", "dave")
    action_id = requested(capsys, db)
    assert json_of(capsys, db, "approvals", action_id)["requested_by"] == "dave"


@pytest.mark.spec("E-7")
@pytest.mark.parametrize("name", ["", " bob", "x" * 65, "a\tb"])
def test_a_bad_as_is_refused_naming_the_flag(
    db: Path, deploy: str, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    for args in (["submit", "--task", "deploy"], ["approve", "apr-" + "0" * 32]):
        status, out, err = qlk(capsys, db, *args, "--as", name)
        assert (status, out) == (2, "")
        assert one_line(err).startswith(f"qlk: --as {name!r}: a name must be ")
    assert json_of(capsys, db, "approvals", "--all") == []  # nothing was written


def test_as_goes_with_a_task(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = qlk(capsys, db, "submit", "--as", "bob", "--", "true")
    assert (status, out) == (2, "")
    assert one_line(err) == "qlk: --as names who asks for an approval: it goes with --task"


def test_a_task_without_approval_still_prints_a_run_id(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert qlk(capsys, db, "task", "add", "hello", "--", "true")[0] == 0
    status, out, err = qlk(capsys, db, "submit", "--task", "hello", "--as", "bob")
    assert (status, err) == (0, "")
    assert re.fullmatch(r"run-[0-9a-f]{32}\n", out)


# -- approvals -------------------------------------------------------------------------------------


def test_approvals_lists_pending_requests_newest_first(
    db: Path, deploy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert qlk(capsys, db, "approvals") == (
        0,
        "no pending approval requests (--all lists every status)\n",
        "",
    )
    first = requested(capsys, db, "--as", "carol")
    second = requested(capsys, db, "--as", "erin")
    decided = requested(capsys, db, "--as", "carol")
    assert qlk(capsys, db, "deny", decided, "--as", "bob")[0] == 0
    status, out, err = qlk(capsys, db, "approvals")
    assert (status, err) == (0, "")
    header = out.splitlines()[1]
    assert re.fullmatch(r"\| id +\| task +\| status +\| requested +\| decided +\| run +\|", header)
    ids = ACTION_ID.findall(out)
    assert [f"apr-{i}" for i in ids] == [second, first]  # newest first, pending only
    assert re.search(rf"\| {second} \| deploy \| pending \| erin, ", out)
    listed = json_of(capsys, db, "approvals", "--all")
    assert [d["action_id"] for d in listed] == [decided, second, first]
    assert [d["status"] for d in listed] == ["denied", "pending", "pending"]
    assert set(listed[0]) == {
        "action_id", "status", "task", "task_revision", "run_id", "run_status",
        "requested_by", "requested_at_ms", "requested_at", "decided_by", "decided_at_ms",
        "decided_at", "claimed_at_ms", "finished_at_ms", "code", "events",
    }  # fmt: skip
    assert [(e["type"], e["actor"], e["by"]) for e in listed[0]["events"]] == [
        ("action.requested", "user", "carol"),
        ("action.denied", "user", "bob"),
    ]
    status, out, _ = qlk(capsys, db, "approvals", "--all")
    assert re.search(rf"\| {decided} \| deploy \| denied  \| carol, .*\| bob, ", out), out


def test_approvals_pages_hold_at_most_64_and_say_when_more_exist(
    db: Path, deploy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = [requested(capsys, db) for _ in range(approvals_command.PAGE + 1)]
    status, out, err = qlk(capsys, db, "approvals", "--json")
    assert status == 0
    listed = json.loads(out)
    assert len(listed) == 64
    assert one_line(err, prefix=None) == (
        f"qlk approvals: (the newest 64 shown; older ones: qlk approvals --before "
        f"{listed[-1]['action_id']})"
    )
    status, out, _ = qlk(capsys, db, "approvals")
    assert status == 0
    assert out.splitlines()[-1] == (
        f"(the newest 64 shown; older ones: qlk approvals --before {listed[-1]['action_id']})"
    )
    rest = json_of(capsys, db, "approvals", "--before", listed[-1]["action_id"])
    assert {d["action_id"] for d in listed + rest} == set(ids)
    assert len(rest) == 1
    status, out, err = qlk(capsys, db, "approvals", "--before", rest[0]["action_id"])
    assert (status, out, err) == (
        0,
        "no pending approval requests (--all lists every status)\n",
        "",
    )


@pytest.mark.spec("E-7")
def test_approvals_of_an_unknown_id_is_exit_2(
    db: Path, deploy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = "apr-" + "f" * 32
    for args in (["approvals", missing], ["approvals", "--before", missing]):
        status, out, err = qlk(capsys, db, *args)
        assert (status, out) == (2, "")
        assert one_line(err).endswith(
            f"{missing}: no such approval request (qlk approvals lists them) [ACTION_NOT_FOUND]"
        )


def test_approvals_id_shows_the_request_and_its_events(
    db: Path, deploy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    action_id = requested(capsys, db, "--as", "carol")
    assert qlk(capsys, db, "approve", action_id, "--as", "bob")[0] == 0
    status, out, err = qlk(capsys, db, "approvals", action_id)
    assert (status, err) == (0, "")
    lines = out.splitlines()
    assert lines[0] == f"approval {action_id}: approved"
    assert lines[1] == "  task      deploy (revision 1)"
    assert lines[2] == f"  run       {run_of(action_id)}: not admitted"
    assert lines[3].startswith("  requested carol at ")
    assert lines[4].startswith("  decided   bob at ")
    assert re.search(r"\| 1 +\| action\.requested \| user +\| carol \|", out)
    assert re.search(r"\| 2 +\| action\.approved +\| user +\| bob +\|", out)


# -- approve and deny ------------------------------------------------------------------------------


@pytest.mark.spec("E-7")
def test_approve_then_the_same_again_then_deny(
    db: Path, deploy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    action_id = requested(capsys, db)
    run_id = run_of(action_id)
    assert qlk(capsys, db, "approve", action_id, "--as", "bob") == (
        0,
        f"approved {action_id} (as bob); qlk serve --approvals admits its Run {run_id}\n",
        "",
    )
    status, out, err = qlk(capsys, db, "approve", action_id, "--as", "bob")  # an exact replay
    assert (status, err) == (0, "")
    assert re.fullmatch(rf"{action_id} already approved by bob at [-0-9 :]+Z\n", out)
    for args in (["deny", action_id, "--as", "bob"], ["approve", action_id, "--as", "alice"]):
        status, out, err = qlk(capsys, db, *args)
        assert (status, out) == (2, "")
        assert re.fullmatch(
            rf"qlk: ID {action_id}: already approved by bob at [-0-9 :]+Z \[ACTION_NOT_PENDING\]",
            one_line(err),
        )
    document = json_of(capsys, db, "approvals", action_id)
    assert (document["status"], document["decided_by"]) == ("approved", "bob")
    assert [e["type"] for e in document["events"]] == ["action.requested", "action.approved"]


@pytest.mark.spec("E-7")
def test_deny_then_approve_is_refused_naming_who_denied(
    db: Path, deploy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    action_id = requested(capsys, db)
    assert qlk(capsys, db, "deny", action_id, "--as", "alice") == (
        0,
        f"denied {action_id} (as alice); its Run {run_of(action_id)} never runs\n",
        "",
    )
    status, out, _ = qlk(capsys, db, "deny", action_id, "--as", "alice")
    assert status == 0
    assert out.startswith(f"{action_id} already denied by alice at ")
    done = qlk_process(db.parent, "approve", action_id, "--as", "bob")
    assert (done.returncode, done.stdout) == (2, "")
    assert re.fullmatch(
        rf"qlk: ID {action_id}: already denied by alice at [-0-9 :]+Z \[ACTION_NOT_PENDING\]",
        one_line(done.stderr),
    )


@pytest.mark.spec("E-7")
@pytest.mark.parametrize("action_id", ["apr-" + "0" * 32, "not an id!", "run-x"])
@pytest.mark.parametrize("command", ["approve", "deny"])
def test_an_unknown_request_is_exit_2(
    db: Path, deploy: str, capsys: pytest.CaptureFixture[str], command: str, action_id: str
) -> None:
    status, out, err = qlk(capsys, db, command, action_id, "--as", "bob")
    assert (status, out) == (2, "")
    assert one_line(err) == (
        f"qlk: ID {action_id}: no such approval request (qlk approvals lists them) "
        "[ACTION_NOT_FOUND]"
    )


@pytest.mark.spec("E-7")
def test_a_database_failure_is_exit_3(
    db: Path, deploy: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    action_id = requested(capsys, db)

    def failing(*_args: object) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(approvals_command, "execute_action", failing)
    status, out, err = qlk(capsys, db, "approve", action_id, "--as", "bob")
    assert (status, out) == (3, "")
    assert one_line(err) == f"qlk: {db}: the database failed: OperationalError: disk I/O error"


def test_a_file_that_is_not_a_database_is_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "not.db"
    bad.write_bytes(b"not a database at all" * 100)
    for args in (["approvals"], ["approve", "apr-" + "0" * 32, "--as", "bob"]):
        done = qlk_process(tmp_path, *args, db=bad)
        assert done.returncode == 2
        assert str(bad) in one_line(done.stderr)


# -- status of a Run that waits --------------------------------------------------------------------


def test_status_of_a_run_whose_request_waits_says_so(
    db: Path, deploy: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pending, approved, denied = (requested(capsys, db) for _ in range(3))
    assert qlk(capsys, db, "approve", approved, "--as", "bob")[0] == 0
    assert qlk(capsys, db, "deny", denied, "--as", "alice")[0] == 0
    assert qlk(capsys, db, "status", run_of(pending)) == (
        0,
        f"run {run_of(pending)}: awaiting approval (qlk approve {pending})\n",
        "",
    )
    status, out, _ = qlk(capsys, db, "status", run_of(approved))
    assert status == 0
    assert out.startswith(f"run {run_of(approved)}: approved by bob at ")
    assert out.endswith(f"not admitted yet: qlk serve --approvals admits it ({approved})\n")
    status, out, _ = qlk(capsys, db, "status", run_of(denied))
    assert status == 0
    assert re.fullmatch(
        rf"run {run_of(denied)}: denied by alice at [-0-9 :]+Z; it never runs \({denied}\)\n", out
    )
    document = json_of(capsys, db, "status", run_of(pending))
    assert document["run"] is None
    assert (document["approval"]["action_id"], document["approval"]["status"]) == (
        pending,
        "pending",
    )
    # a Run id no request names is still unknown
    status, out, err = qlk(capsys, db, "status", "run-" + "0" * 32)
    assert (status, out) == (2, "")
    assert one_line(err).endswith("no such run [RUN_NOT_FOUND]")


# -- serve -----------------------------------------------------------------------------------------


def test_serve_help_gives_the_approval_cadence_of_each_profile(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for profile in ("standalone", "edge"):
        seconds = local_primary_resource_policy(profile).interval_ms // 1000
        assert f"every {seconds}s on {profile}" in text
    assert "--approvals" in text


@pytest.mark.spec("E-7")
def test_serve_approvals_with_the_cluster_profile_is_exit_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status = main(["serve", "--profile", "cluster", "--approvals", "--dsn", "postgresql://x@h/d"])
    err = capsys.readouterr().err
    assert status == 2
    line = one_line(err)
    assert line.startswith("qlk: --approvals: the cluster profile")
    assert line.endswith("[PROFILE_NOT_SUPPORTED]")


@pytest.mark.slow  # two `qlk serve` processes
def test_only_serve_with_approvals_admits_an_approved_request(
    db: Path, deploy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without `--approvals` an approved request waits (nothing admits it; `--until-idle`
    returns); with it the Run is admitted once and runs once."""
    action_id = requested(capsys, db)
    assert qlk(capsys, db, "approve", action_id, "--as", "bob")[0] == 0
    plain = qlk_process(tmp_path, "serve", "--until-idle", db=db)
    assert plain.returncode == 0, plain.stderr
    assert json_of(capsys, db, "approvals", action_id)["status"] == "approved"
    assert json_of(capsys, db, "status")["total"] == 0
    served = qlk_process(tmp_path, "serve", "--approvals", "--until-idle", db=db)
    assert served.returncode == 0, served.stderr
    assert "(standalone; approvals every 2s)" in served.stderr
    assert f"started  {run_of(action_id)}" in served.stdout
    document = json_of(capsys, db, "status", run_of(action_id))
    assert document["run"]["status"] == "succeeded"
    assert [a["status"] for a in document["attempts"]] == ["succeeded"]
    shown = json_of(capsys, db, "approvals", action_id)
    assert (shown["status"], shown["run_status"]) == ("started", "succeeded")
    assert (tmp_path / "deployed.txt").read_text() == "deployed\n"
    again = qlk_process(tmp_path, "serve", "--approvals", "--until-idle", db=db)
    assert again.returncode == 0
    assert (tmp_path / "deployed.txt").read_text() == "deployed\n"  # never a second time
