"""The POSIX executor, inspector and controller with real processes (issue 6 item 6; SPEC §3.5,
§3.11 step 3, §3.15 step 6, D-12).

Every process is started through `Launcher`, whose fixture SIGKILLs and reaps every process group
it still owns, whatever the test did; every test runs in well under 5 s.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel.specs.states import CancelReason, StopResult
from runners.worker.posix.executor import (
    DurableHandle,
    HandleError,
    HandleErrorCode,
    InspectionResult,
    PersistedExecutionController,
    PersistedExecutionInspector,
    PosixExecutor,
    ProbeFailed,
    ProcFs,
    SpawnAmbiguous,
    SpawnAmbiguousCode,
    SpawnRefusalCode,
    SpawnRefused,
    StopFailed,
    StopOutcome,
    parse_proc_stat,
)
from runners.worker.posix.launch_wrapper import WRAPPER_MODULE
from runners.worker.posix.receipts import ReceiptErrorCode, ReceiptWriteError
from tests.support.posix_processes import (
    SLEEP_30,
    STARTED_AT_MS,
    Launcher,
    children_of,
    exit_with,
    fresh_token,
    group_exists,
    proc_state,
    wait_until,
)

INSPECTOR = PersistedExecutionInspector()
CONTROLLER = PersistedExecutionController()


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path)
    try:
        yield launcher
    finally:
        launcher.close()


def _boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def _start_ticks(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rfind(")") + 2 :].split()[19])


# -- start and inspect ------------------------------------------------------------------------


def test_start_returns_a_durable_handle_of_the_running_group_leader(launcher: Launcher) -> None:
    spec = launcher.spec(SLEEP_30, "att-running")
    handle = launcher.start(spec)

    assert INSPECTOR.inspect(handle.text) is InspectionResult.RUNNING
    assert handle.boot_id == _boot_id()
    assert handle.start_ticks == _start_ticks(handle.pid)
    assert handle.started_at_ms == STARTED_AT_MS  # D-12: the value fixed at `launching`
    assert handle.text == (
        f"posix:v1:{handle.boot_id}:{handle.pid}:{handle.start_ticks}:{STARTED_AT_MS}"
    )
    assert DurableHandle.parse(handle.text) == handle
    # Its own session and process group, with the command inside the group.
    assert os.getpgid(handle.pid) == handle.pid
    assert os.getsid(handle.pid) == handle.pid
    assert wait_until(lambda: len(children_of(handle.pid)) == 1)
    (child,) = children_of(handle.pid)
    assert os.getpgid(child) == handle.pid
    assert launcher.executor.owns(handle)


def test_a_killed_group_inspects_exited_as_a_zombie_and_after_reaping(
    launcher: Launcher,
) -> None:
    handle = launcher.start(launcher.spec(SLEEP_30, "att-killed"))
    os.killpg(handle.pid, signal.SIGKILL)

    # Not reaped yet: the wrapper is a zombie (state Z) of this process, which counts as exited.
    assert wait_until(lambda: proc_state(handle.pid) == "Z")
    assert INSPECTOR.inspect(handle.text) is InspectionResult.EXITED
    assert CONTROLLER.stop(handle.text, CancelReason.RECONCILE) is StopOutcome.ALREADY_EXITED

    assert launcher.finish(handle) == -signal.SIGKILL
    assert proc_state(handle.pid) is None
    assert INSPECTOR.inspect(handle.text) is InspectionResult.EXITED
    # SIGKILL left the wrapper no chance to publish: exited without receipt.
    assert launcher.receipts.read("att-killed") is None


def test_a_quick_command_exits_and_its_wrapper_publishes_before_exiting(
    launcher: Launcher,
) -> None:
    handle = launcher.start(launcher.spec(exit_with(0), "att-quick"))
    assert launcher.finish(handle) == 0
    assert INSPECTOR.inspect(handle.text) is InspectionResult.EXITED
    assert CONTROLLER.stop(handle.text, CancelReason.USER) is StopOutcome.ALREADY_EXITED
    assert launcher.receipts.read("att-quick") is not None


# -- identity -------------------------------------------------------------------------------


def test_a_wrong_start_time_is_an_identity_mismatch_and_stop_never_signals(
    launcher: Launcher,
) -> None:
    handle = launcher.start(launcher.spec(SLEEP_30, "att-mismatch"))
    assert wait_until(lambda: len(children_of(handle.pid)) == 1)
    (child,) = children_of(handle.pid)
    reused = dataclasses.replace(handle, start_ticks=handle.start_ticks + 1)
    other_boot = dataclasses.replace(handle, boot_id="00000000-0000-4000-8000-000000000000")

    for impostor in (reused, other_boot):
        assert INSPECTOR.inspect(impostor.text) is InspectionResult.IDENTITY_MISMATCH
        assert (
            CONTROLLER.stop(impostor.text, CancelReason.RECONCILE) is StopOutcome.IDENTITY_MISMATCH
        )

    # The real process group was not signalled: wrapper and command still run.
    assert launcher.executor.wait(handle, 0.3) is None
    assert proc_state(handle.pid) in {"S", "R"}
    assert proc_state(child) in {"S", "R"}
    assert INSPECTOR.inspect(handle.text) is InspectionResult.RUNNING


def test_a_pid_that_is_not_its_own_group_leader_is_never_signalled(
    launcher: Launcher,
) -> None:
    """A live process with the handle's PID and start time but another process group (here: the
    command inside the wrapper's group) is not a group the executor created."""
    handle = launcher.start(launcher.spec(SLEEP_30, "att-not-leader"))
    assert wait_until(lambda: len(children_of(handle.pid)) == 1)
    (child,) = children_of(handle.pid)
    as_child = DurableHandle(handle.boot_id, child, _start_ticks(child), STARTED_AT_MS)

    assert INSPECTOR.inspect(as_child.text) is InspectionResult.RUNNING
    assert CONTROLLER.stop(as_child.text, CancelReason.RECONCILE) is StopOutcome.IDENTITY_MISMATCH
    assert proc_state(child) in {"S", "R"}


BAD_HANDLES = [
    ("", HandleErrorCode.UNSUPPORTED_KIND),
    ("pid:123", HandleErrorCode.UNSUPPORTED_KIND),
    ("posix:v2:x", HandleErrorCode.UNSUPPORTED_VERSION),
    ("posix:v1:", HandleErrorCode.MALFORMED),
    ("posix:v1:1fd0ba07-5eaf-4c81-ae05-7c119db71bfb:12:34", HandleErrorCode.MALFORMED),
    ("posix:v1:1fd0ba07-5eaf-4c81-ae05-7c119db71bfb:012:34:5", HandleErrorCode.MALFORMED),
    ("posix:v1:1fd0ba07-5eaf-4c81-ae05-7c119db71bfb:0:34:5", HandleErrorCode.MALFORMED),
    ("posix:v1:1fd0ba07-5eaf-4c81-ae05-7c119db71bfb:-1:34:5", HandleErrorCode.MALFORMED),
    ("posix:v1:1FD0BA07-5EAF-4C81-AE05-7C119DB71BFB:12:34:5", HandleErrorCode.MALFORMED),
    ("posix:v1:1fd0ba07-5eaf-4c81-ae05-7c119db71bfb:12:34:5\n", HandleErrorCode.MALFORMED),
    ("posix:v1:1fd0ba07-5eaf-4c81-ae05-7c119db71bfb:12:34:5:6", HandleErrorCode.MALFORMED),
    ("posix:v1:1fd0ba07-5eaf-4c81-ae05-7c119db71bfb:99999999:34:5", HandleErrorCode.OUT_OF_RANGE),
    ("posix:v1:" + "a" * 200, HandleErrorCode.TOO_LONG),
]


@pytest.mark.parametrize(("text", "code"), BAD_HANDLES)
def test_invalid_handle_text_is_invalid_everywhere(text: str, code: HandleErrorCode) -> None:
    with pytest.raises(HandleError) as raised:
        DurableHandle.parse(text)
    assert raised.value.code is code
    assert str(raised.value) == f"executor handle: invalid ({code.value})"
    assert INSPECTOR.inspect(text) is InspectionResult.INVALID
    assert CONTROLLER.stop(text, CancelReason.RECONCILE) is StopOutcome.INVALID
    assert StopOutcome.INVALID.conclusive is None


def test_a_handle_that_is_not_a_string_is_invalid() -> None:
    with pytest.raises(HandleError) as raised:
        DurableHandle.parse(12345)
    assert raised.value.code is HandleErrorCode.NOT_A_STRING


@given(st.text(max_size=160))
def test_the_handle_parser_never_raises_anything_else(text: str) -> None:
    try:
        handle = DurableHandle.parse(text)
    except HandleError:
        return
    assert handle.text == text  # one handle, one text form


@given(
    st.integers(1, 2**22),
    st.integers(0, 2**64 - 1),
    st.integers(0, 2**63 - 1),
)
def test_every_handle_round_trips_through_its_text(pid: int, ticks: int, ms: int) -> None:
    handle = DurableHandle("1fd0ba07-5eaf-4c81-ae05-7c119db71bfb", pid, ticks, ms)
    assert DurableHandle.parse(handle.text) == handle
    assert len(handle.text) <= 128


def test_proc_stat_fields_are_counted_from_the_last_parenthesis() -> None:
    fields = " ".join(str(n) for n in range(4, 53))  # fields 4..52
    found = parse_proc_stat(f"77 (a) b (c)) S {fields}")
    assert found.state == "S"
    assert found.pgrp == 5
    assert found.session == 6
    assert found.start_ticks == 22
    with pytest.raises(ProbeFailed):
        parse_proc_stat("77 (truncated) S 1 2")


# -- stop -----------------------------------------------------------------------------------


def test_stop_terminates_the_whole_group_and_the_wrapper_records_it(launcher: Launcher) -> None:
    handle = launcher.start(launcher.spec(SLEEP_30, "att-stop"))
    assert wait_until(lambda: len(children_of(handle.pid)) == 1)
    (child,) = children_of(handle.pid)

    outcome = CONTROLLER.stop(handle.text, CancelReason.RECONCILE)
    assert outcome is StopOutcome.TERMINATION_REQUESTED
    assert outcome.conclusive is StopResult.TERMINATION_REQUESTED

    # The command died of SIGTERM; the wrapper caught it, outlived the command, published.
    assert launcher.finish(handle) == 0
    assert not group_exists(handle.pid)
    assert proc_state(child) is None
    receipt = launcher.receipts.read("att-stop")
    assert receipt is not None
    assert receipt.outcome == "failed"
    assert receipt.exit_code == -signal.SIGTERM
    assert INSPECTOR.inspect(handle.text) is InspectionResult.EXITED
    again = CONTROLLER.stop(handle.text, CancelReason.RECONCILE)
    assert again is StopOutcome.ALREADY_EXITED
    assert again.conclusive is StopResult.ALREADY_EXITED


def test_without_procfs_everything_is_unsupported(tmp_path: Path, launcher: Launcher) -> None:
    nothing = ProcFs(tmp_path / "no-proc")
    handle = launcher.start(launcher.spec(SLEEP_30, "att-unsupported"))

    assert PersistedExecutionInspector(nothing).inspect(handle.text) is (
        InspectionResult.UNSUPPORTED
    )
    stop = PersistedExecutionController(nothing).stop(handle.text, CancelReason.RECONCILE)
    assert stop is StopOutcome.UNSUPPORTED
    assert INSPECTOR.inspect(handle.text) is InspectionResult.RUNNING  # not signalled

    blind = PosixExecutor(launcher.receipts, proc=nothing)
    with pytest.raises(SpawnRefused) as raised:
        blind.start(launcher.spec(SLEEP_30, "att-unsupported-2"))
    assert raised.value.refusal is SpawnRefusalCode.PLATFORM_UNSUPPORTED


def test_an_unreadable_proc_is_a_probe_failure_never_exited(tmp_path: Path) -> None:
    fake = tmp_path / "proc"
    (fake / "sys" / "kernel" / "random").mkdir(parents=True)
    boot = "1fd0ba07-5eaf-4c81-ae05-7c119db71bfb"
    (fake / "sys" / "kernel" / "random" / "boot_id").write_text(boot + "\n")
    (fake / "42").mkdir()
    (fake / "42" / "stat").mkdir()  # reading a directory fails with EISDIR
    handle = DurableHandle(boot, 42, 7, 0)

    with pytest.raises(ProbeFailed):
        PersistedExecutionInspector(ProcFs(fake)).inspect(handle.text)
    # The controller cannot verify, so it raises (§3.15 step 6: write nothing, retry later).
    with pytest.raises(StopFailed) as raised:
        PersistedExecutionController(ProcFs(fake)).stop(handle.text, CancelReason.RECONCILE)
    assert raised.value.reason == "stat_unreadable"
    (fake / "sys" / "kernel" / "random" / "boot_id").write_text("not-a-boot-id\n")
    with pytest.raises(ProbeFailed):
        PersistedExecutionInspector(ProcFs(fake)).inspect(handle.text)
    (fake / "sys" / "kernel" / "random" / "boot_id").write_text(boot + "\n")
    assert PersistedExecutionInspector(ProcFs(fake)).inspect(
        dataclasses.replace(handle, pid=43).text
    ) is (InspectionResult.EXITED)


# -- start refusals and ambiguity -------------------------------------------------------------


def test_a_missing_or_unrunnable_executable_is_an_explicit_refusal(
    tmp_path: Path, launcher: Launcher
) -> None:
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    cases = [
        (("no-such-command-ql3",), SpawnRefusalCode.EXECUTABLE_NOT_FOUND),
        ((str(tmp_path / "missing"),), SpawnRefusalCode.EXECUTABLE_NOT_FOUND),
        ((str(plain),), SpawnRefusalCode.EXECUTABLE_NOT_PERMITTED),
        ((str(tmp_path),), SpawnRefusalCode.EXECUTABLE_NOT_PERMITTED),
    ]
    for number, (argv, code) in enumerate(cases):
        with pytest.raises(SpawnRefused) as raised:
            launcher.start(launcher.spec(argv, f"att-refused-{number}"))
        assert raised.value.refusal is code
        assert raised.value.code == code.value
    missing_cwd = dataclasses.replace(
        launcher.spec(SLEEP_30, "att-refused-cwd"), cwd=str(tmp_path / "gone")
    )
    with pytest.raises(SpawnRefused) as raised:
        launcher.start(missing_cwd)
    assert raised.value.refusal is SpawnRefusalCode.CWD_INVALID
    assert launcher.handles == []
    assert launcher.executor.reap() == 0


def test_a_public_receipts_directory_refuses_the_start(launcher: Launcher) -> None:
    launcher.receipts.root.chmod(0o755)
    with pytest.raises(SpawnRefused) as raised:
        launcher.start(launcher.spec(SLEEP_30, "att-public"))
    assert raised.value.refusal is SpawnRefusalCode.RECEIPTS_DIRECTORY_INVALID


def _run_wrapper(payload: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-P", "-m", WRAPPER_MODULE],
        input=payload,
        capture_output=True,
        timeout=60,  # generous: the wrapper answers at once; TimeoutExpired names the wait
        check=False,
        start_new_session=True,
    )


def test_the_wrapper_refuses_when_it_cannot_spawn_and_runs_nothing(launcher: Launcher) -> None:
    """The wrapper's own refusal (the executable vanished after the executor's check)."""
    document = {
        "v": 1,
        "argv": ["gone"],
        "executable": "/nonexistent/ql3-gone",
        "cwd": None,
        "log_path": None,
        "receipts_dir": str(launcher.receipts.root),
        "run_id": "run-1",
        "attempt_id": "att-vanished",
        "callback_sequence": 1,
        "executor_started_at_ms": 0,
        "callback_token": fresh_token().reveal(),
    }
    done = _run_wrapper(json.dumps(document).encode())
    assert done.stdout == b"refused EXECUTABLE_NOT_FOUND\n"
    assert done.returncode == 70
    assert launcher.receipts.read("att-vanished") is None

    garbage = _run_wrapper(b'{"v": 1, "argv": ')
    assert garbage.stdout == b"refused PAYLOAD_INVALID\n"
    assert garbage.returncode == 70


def _fake_python(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake-python"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(stat.S_IRWXU)
    return str(script)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("exec sleep 30", SpawnAmbiguousCode.HANDSHAKE_TIMEOUT),
        ("echo hello; exec sleep 30", SpawnAmbiguousCode.HANDSHAKE_BROKEN),
        # Gone before reading its stdin: the payload write or the handshake read fails first,
        # whichever the scheduler makes happen; both are ambiguous.
        ("exit 0", SpawnAmbiguousCode.PAYLOAD_WRITE_FAILED),
    ],
)
def test_no_trustworthy_handshake_is_ambiguous_and_leaves_no_process(
    tmp_path: Path, launcher: Launcher, body: str, code: SpawnAmbiguousCode
) -> None:
    # Only the timeout case waits for the timeout; the others answer at once (a long bound
    # keeps a loaded machine from turning them into timeouts).
    timeout_s = 0.5 if code is SpawnAmbiguousCode.HANDSHAKE_TIMEOUT else 30.0
    executor = PosixExecutor(
        launcher.receipts, python=_fake_python(tmp_path, body), handshake_timeout_s=timeout_s
    )
    before = set(children_of(os.getpid()))
    with pytest.raises(SpawnAmbiguous) as raised:
        executor.start(launcher.spec(SLEEP_30, "att-ambiguous"))
    if code is SpawnAmbiguousCode.PAYLOAD_WRITE_FAILED:
        assert raised.value.ambiguity in {code, SpawnAmbiguousCode.HANDSHAKE_BROKEN}
    else:
        assert raised.value.ambiguity is code
    assert not isinstance(raised.value, SpawnRefused)  # never reported as a clean refusal
    # The wrapper's whole group was killed and reaped.
    assert set(children_of(os.getpid())) <= before
    assert executor.reap() == 0


def test_a_receipts_directory_that_became_public_is_refused_by_the_wrapper(
    launcher: Launcher,
) -> None:
    """The wrapper re-checks the directory before it spawns: a receipt it could not publish
    privately would turn a completed command into "exited without receipt"."""
    document = {
        "v": 1,
        "argv": ["true"],
        "executable": "/bin/true",
        "cwd": None,
        "log_path": None,
        "receipts_dir": str(launcher.receipts.root),
        "run_id": "run-1",
        "attempt_id": "att-public-wrapper",
        "callback_sequence": 1,
        "executor_started_at_ms": 0,
        "callback_token": fresh_token().reveal(),
    }
    launcher.receipts.root.chmod(0o750)
    done = _run_wrapper(json.dumps(document).encode())
    assert done.stdout == b"refused RECEIPTS_DIRECTORY_INVALID\n"
    with pytest.raises(ReceiptWriteError) as raised:
        launcher.receipts.check_directory(ReceiptWriteError)
    assert raised.value.code is ReceiptErrorCode.RECEIPT_PERMISSIONS


# -- S-1: the token is nowhere but in the wrapper's memory and the receipt ----------------------


@pytest.mark.spec("INBOX-44")
def test_the_token_is_in_no_argv_environment_repr_or_error(
    tmp_path: Path, launcher: Launcher
) -> None:
    token = fresh_token()
    raw = token.reveal().encode()
    spec = launcher.spec(SLEEP_30, "att-secret", token)
    handle = launcher.start(spec)
    assert wait_until(lambda: len(children_of(handle.pid)) == 1)
    (child,) = children_of(handle.pid)
    # Right after fork the child may not have exec'd yet; wait for the command's own argv.
    assert wait_until(lambda: b"time.sleep" in Path(f"/proc/{child}/cmdline").read_bytes())

    for pid in (handle.pid, child):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert cmdline
        assert environ
        assert raw not in cmdline
        assert raw not in environ
    # Neither argv nor the environment of the executor's own process got it either.
    assert raw not in Path(f"/proc/{os.getpid()}/environ").read_bytes()

    texts = [
        repr(spec),
        str(spec),
        repr(handle),
        handle.text,
        repr(launcher.executor),
        repr(launcher.receipts),
        repr(token),
        f"{token}",
    ]
    failing = dataclasses.replace(spec, argv=(str(tmp_path / "missing"),))
    with pytest.raises(SpawnRefused) as refused:
        launcher.start(failing)
    texts += [str(refused.value), repr(refused.value)]
    with pytest.raises(ValueError, match="launch spec") as bad_spec:
        dataclasses.replace(spec, attempt_id="../" + token.reveal())
    texts += [str(bad_spec.value), repr(bad_spec.value)]
    for text in texts:
        assert token.reveal() not in text
    assert "time.sleep" not in repr(spec)  # the command line is not in the repr either (S-1)

    assert CONTROLLER.stop(handle.text, CancelReason.RECONCILE) is (
        StopOutcome.TERMINATION_REQUESTED
    )
    assert launcher.finish(handle) == 0
