"""Task definitions (issue 15 item 3; decisions TK-1..TK-5): what `define_task` accepts, what it
refuses and with which stable code, and that the retry policy is judged by the admission rule
itself (A-3, A-4), never by a second copy of it."""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kernel import AdmitRun, PolicyDefinition, Rejected, Safety, admit_run
from kernel.specs import Code
from kernel.task import (
    DEADLINE_MAX_MS,
    DEADLINE_MIN_MS,
    LOCAL_EXECUTOR_TYPE,
    LOCAL_PROJECT_ID,
    TaskDefinition,
    TaskDefinitionError,
    TaskOrigin,
    TaskRefused,
    TaskRevision,
    adhoc_definition,
    define_task,
)

SAFE = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 60_000)


def _ok(result: TaskDefinition | TaskRefused) -> TaskDefinition:
    assert isinstance(result, TaskDefinition), result
    return result


def test_a_full_definition_is_accepted_and_normalized() -> None:
    task = _ok(
        define_task(
            "nightly.backup-1",
            ["/usr/bin/backup", "--all", ""],
            cwd="/srv",
            env={"B": "2", "A_1": "x=y"},
            cron="  0   3 * *  1-5 ",
            deadline_ms=3_600_000,
            retry_policy=SAFE,
        )
    )
    assert task.argv == ("/usr/bin/backup", "--all", "")
    assert task.env == (("A_1", "x=y"), ("B", "2"))  # sorted: one stored form
    assert task.environment() == {"A_1": "x=y", "B": "2"}
    assert task.cron == "0 3 * * 1-5"
    assert task.origin is TaskOrigin.USER
    assert define_task("t", ("/bin/true",)) == TaskDefinition("t", ("/bin/true",))


NAME, ARGV, CWD, ENV = "name", "argv", "cwd", "env"
CRON, DEADLINE, POLICY = "cron", "deadline_ms", "retry_policy"
BAD_NAME, BAD_DEADLINE = Code.TASK_NAME_INVALID, Code.TASK_DEADLINE_INVALID

REFUSALS: list[tuple[str, dict[str, object], Code, str]] = [
    ("empty name", {"name": ""}, Code.TASK_NAME_INVALID, "name"),
    ("space in name", {"name": "a b"}, Code.TASK_NAME_INVALID, "name"),
    ("leading dot", {"name": ".hidden"}, Code.TASK_NAME_INVALID, "name"),
    ("colon (the ad-hoc namespace)", {NAME: "adhoc:0123456789abcdef"}, BAD_NAME, NAME),
    ("slash", {"name": "a/b"}, Code.TASK_NAME_INVALID, "name"),
    ("non-ASCII", {"name": "tâche"}, Code.TASK_NAME_INVALID, "name"),
    ("65 characters", {"name": "a" * 65}, Code.TASK_NAME_INVALID, "name"),
    ("not a string", {"name": 7}, Code.TASK_NAME_INVALID, "name"),
    ("empty argv", {"argv": []}, Code.TASK_ARGV_INVALID, "argv"),
    ("a string argv", {"argv": "/bin/true"}, Code.TASK_ARGV_INVALID, "argv"),
    ("empty program", {"argv": ["", "x"]}, Code.TASK_ARGV_INVALID, "argv"),
    ("NUL in an argument", {"argv": ["/bin/echo", "a\0b"]}, Code.TASK_ARGV_INVALID, "argv"),
    ("non-string argument", {"argv": ["/bin/echo", 1]}, Code.TASK_ARGV_INVALID, "argv"),
    ("too many arguments", {"argv": ["x"] * 1025}, Code.TASK_ARGV_INVALID, "argv"),
    ("relative cwd", {"cwd": "srv"}, Code.TASK_CWD_INVALID, "cwd"),
    ("empty cwd", {"cwd": ""}, Code.TASK_CWD_INVALID, "cwd"),
    ("NUL in cwd", {"cwd": "/a\0"}, Code.TASK_CWD_INVALID, "cwd"),
    ("env name with =", {"env": {"A=B": "1"}}, Code.TASK_ENV_INVALID, "env"),
    ("env name with a leading digit", {"env": {"1A": "1"}}, Code.TASK_ENV_INVALID, "env"),
    ("empty env name", {"env": {"": "1"}}, Code.TASK_ENV_INVALID, "env"),
    ("env name with a space", {"env": {"A B": "1"}}, Code.TASK_ENV_INVALID, "env"),
    ("NUL in an env value", {"env": {"A": "\0"}}, Code.TASK_ENV_INVALID, "env"),
    ("non-string env value", {"env": {"A": 1}}, Code.TASK_ENV_INVALID, "env"),
    ("env not a mapping", {"env": [("A", "1")]}, Code.TASK_ENV_INVALID, "env"),
    ("a macro", {"cron": "@hourly"}, Code.TASK_CRON_INVALID, "cron"),
    ("seconds (6 fields)", {"cron": "0 * * * * *"}, Code.TASK_CRON_INVALID, "cron"),
    ("years (7 fields)", {"cron": "0 0 1 1 * * 2030"}, Code.TASK_CRON_INVALID, "cron"),
    ("4 fields", {"cron": "* * * *"}, Code.TASK_CRON_INVALID, "cron"),
    ("not cron characters", {"cron": "* * * * $(reboot)"}, Code.TASK_CRON_INVALID, "cron"),
    ("empty cron", {"cron": ""}, Code.TASK_CRON_INVALID, "cron"),
    ("zero deadline", {"deadline_ms": 0}, Code.TASK_DEADLINE_INVALID, "deadline_ms"),
    ("deadline below 1 s", {DEADLINE: DEADLINE_MIN_MS - 1}, BAD_DEADLINE, DEADLINE),
    ("deadline above 7 days", {DEADLINE: DEADLINE_MAX_MS + 1}, BAD_DEADLINE, DEADLINE),
    ("boolean deadline", {"deadline_ms": True}, Code.TASK_DEADLINE_INVALID, "deadline_ms"),
    (
        "unknown safety with retry enabled (A-4)",
        {"retry_policy": PolicyDefinition(3, True, Safety.UNKNOWN, 0, 0)},
        Code.RUN_RETRY_POLICY_UNSAFE,
        "retry_policy",
    ),
    (
        "17 attempts (A-3)",
        {"retry_policy": PolicyDefinition(17, True, Safety.IDEMPOTENT, 0, 0)},
        Code.INVALID_RUN_RETRY_POLICY,
        "retry_policy",
    ),
    (
        "base above max (A-3)",
        {"retry_policy": PolicyDefinition(2, True, Safety.IDEMPOTENT, 10, 5)},
        Code.INVALID_RUN_RETRY_POLICY,
        "retry_policy",
    ),
    ("not a policy", {POLICY: {"max_attempts": 1}}, Code.INVALID_RUN_RETRY_POLICY, POLICY),
]  # fmt: skip


@pytest.mark.parametrize(("why", "change", "code", "field"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusals_carry_a_stable_code_and_the_field(
    why: str, change: dict[str, object], code: Code, field: str
) -> None:
    arguments: dict[str, object] = {"name": "task", "argv": ["/bin/true"], **change}
    name, argv = arguments.pop("name"), arguments.pop("argv")
    result = define_task(name, argv, **arguments)
    assert result == TaskRefused(code, field), why
    assert isinstance(result.code, str)  # a StrEnum: the stable wire string


def test_unknown_safety_without_retry_is_accepted() -> None:
    """A-4 refuses `unknown` only when retry is enabled (`retry_on_lost and max_attempts > 1`)."""
    for policy in (
        PolicyDefinition(1, True, Safety.UNKNOWN, 0, 0),
        PolicyDefinition(5, False, Safety.UNKNOWN, 0, 0),
    ):
        assert _ok(define_task("t", ["/bin/true"], retry_policy=policy)).retry_policy == policy


POLICIES = st.builds(
    PolicyDefinition,
    max_attempts=st.integers(-2, 18),
    retry_on_lost=st.booleans(),
    safety=st.sampled_from(Safety),
    backoff_base_ms=st.integers(-1, 86_400_001),
    backoff_max_ms=st.integers(-1, 86_400_001),
)


@given(policy=POLICIES)
def test_a_task_policy_is_refused_exactly_when_admission_would_refuse_it(
    policy: PolicyDefinition,
) -> None:
    """One rule, not two: the task's refusal code is the one `admit_run` returns for the same
    provider policy (A-3, A-4), and a policy admission accepts is accepted here."""
    command = AdmitRun("r", "a", "local", "t", 1, LOCAL_EXECUTOR_TYPE, provider_policy=policy)
    admitted = admit_run(None, command, 0)
    defined = define_task("t", ["/bin/true"], retry_policy=policy)
    if isinstance(admitted, Rejected):
        assert defined == TaskRefused(admitted.code, "retry_policy")
    else:
        assert isinstance(defined, TaskDefinition)


@given(name=st.text(max_size=70))
def test_env_names_are_posix_portable_names(name: str) -> None:
    result = define_task("t", ["/bin/true"], env={name: "v"})
    portable = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name, re.ASCII) is not None
    assert isinstance(result, TaskDefinition) is portable


@given(name=st.text(max_size=70))
def test_task_names_follow_ts2(name: str) -> None:
    result = define_task(name, ["/bin/true"])
    expected = re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", name, re.ASCII) is not None
    assert isinstance(result, TaskDefinition) is expected
    if not expected:
        assert result == TaskRefused(Code.TASK_NAME_INVALID, "name")


def test_direct_construction_cannot_bypass_validation() -> None:
    with pytest.raises(TaskDefinitionError) as info:
        TaskDefinition("t", ())
    assert info.value.code is Code.TASK_ARGV_INVALID
    with pytest.raises(TaskDefinitionError):
        TaskDefinition("t", ("/bin/true",), cron="*  * * * *")  # not the normalized form
    with pytest.raises(TaskDefinitionError):
        TaskDefinition("t", ("/bin/true",), env=(("B", "1"), ("A", "2")))  # not sorted
    with pytest.raises(TaskDefinitionError):
        TaskDefinition("t", ("/bin/true",), env=(("A", "1"), ("A", "2")))  # duplicate


def test_repr_hides_argv_and_environment_values() -> None:
    task = _ok(define_task("t", ["/bin/login", "hunter2"], env={"TOKEN": "s3cr3t"}))
    revision = TaskRevision(task, 1, 0)
    for text in (repr(task), repr(revision), repr(revision.execution()), str(task)):
        assert "hunter2" not in text
        assert "s3cr3t" not in text


def test_digest_is_stable_and_covers_every_field() -> None:
    base = _ok(define_task("t", ["/bin/true"], cron="* * * * *"))
    assert base.digest == _ok(define_task("t", ["/bin/true"], cron="*   * * * *")).digest
    variants = [
        define_task("u", ["/bin/true"], cron="* * * * *"),
        define_task("t", ["/bin/false"], cron="* * * * *"),
        define_task("t", ["/bin/true"], cron="* * * * *", cwd="/"),
        define_task("t", ["/bin/true"], cron="* * * * *", env={"A": ""}),
        define_task("t", ["/bin/true"], cron="*/2 * * * *"),
        define_task("t", ["/bin/true"], cron="* * * * *", deadline_ms=1_000),
        define_task("t", ["/bin/true"], cron="* * * * *", retry_policy=SAFE),
        define_task("t", ["/bin/true"]),
    ]
    digests = {_ok(v).digest for v in variants} | {base.digest}
    assert len(digests) == len(variants) + 1


def test_revision_and_execution_carry_what_the_launcher_needs() -> None:
    task = _ok(
        define_task("t", ["/bin/echo", "hi"], cwd="/srv/work", env={"A": "1"}, deadline_ms=5_000)
    )
    revision = TaskRevision(task, 3, 42)
    assert (revision.name, revision.revision, revision.cron) == ("t", 3, None)
    execution = revision.execution()
    assert (execution.task, execution.revision, execution.argv) == ("t", 3, ("/bin/echo", "hi"))
    assert (execution.cwd, execution.environment(), execution.deadline_ms) == (
        "/srv/work",
        {"A": "1"},
        5_000,
    )
    assert execution.execution_spec()["argv"] == ["/bin/echo", "hi"]
    with pytest.raises(ValueError, match="revision"):
        TaskRevision(task, 0, 0)
    assert dataclasses.is_dataclass(execution)
    assert LOCAL_PROJECT_ID == "local"


def test_an_adhoc_command_is_an_implicit_task_named_by_its_content() -> None:
    """TK-5: the same command is the same task; a different one another; never a user's name."""
    one = _ok(adhoc_definition(["/bin/echo", "hi"], env={"A": "1"}))
    assert one == _ok(adhoc_definition(("/bin/echo", "hi"), env={"A": "1"}))
    assert re.fullmatch(r"adhoc:[0-9a-f]{16}", one.name)
    assert one.origin is TaskOrigin.ADHOC
    assert (one.cron, one.retry_policy) == (None, None)
    others = [
        adhoc_definition(["/bin/echo", "ho"], env={"A": "1"}),
        adhoc_definition(["/bin/echo", "hi"]),
        adhoc_definition(["/bin/echo", "hi"], env={"A": "1"}, cwd="/"),
        adhoc_definition(["/bin/echo", "hi"], env={"A": "1"}, deadline_ms=2_000),
    ]
    assert len({_ok(o).name for o in others} | {one.name}) == 5
    assert isinstance(define_task(one.name, ["/bin/echo", "hi"]), TaskRefused)
    assert adhoc_definition([]) == TaskRefused(Code.TASK_ARGV_INVALID, "argv")
    assert adhoc_definition(["x"], cwd="rel") == TaskRefused(Code.TASK_CWD_INVALID, "cwd")
    with pytest.raises(TaskDefinitionError):  # an implicit task is never scheduled
        dataclasses.replace(one, cron="* * * * *")
    with pytest.raises(TaskDefinitionError):  # and its name is its content's
        dataclasses.replace(one, argv=("/bin/false",))
