"""Task definitions and revisions (issue 15 item 3; decisions TK-1..TK-5).

A *task* is a durable definition a user runs, by hand or on a schedule: a name, an argv (executed
directly, never through a shell unless the user writes one into argv), an optional working
directory and environment, an optional 5-field cron expression, an optional deadline and an
optional admission-time retry policy. Every edit makes a new immutable *revision*; a Run keeps the
revision it was admitted with (`AdmitRun.task_revision`).

Validation returns a value, never raises, for what a user typed: `define_task(...)` gives either a
`TaskDefinition` or a `TaskRefused(code, field)` whose `code` is a stable `Code` string. A
`TaskDefinition` built directly runs the same checks in `__post_init__` and raises
`TaskDefinitionError` (a `ValueError` carrying the same code and field), so no invalid definition
exists anywhere. Messages name the field, never the value: an environment value may be a secret
(S-1 spirit; argv and env are never printed by this module).

The retry policy is checked by the admission rule itself (`admission_policy_code`, A-3 and A-4:
`unknown` safety with retry enabled is refused), so a task can never hold a policy its fires would
be refused for.

The cron text is checked here for its shape only (TK-3: exactly five fields of cron characters;
`@hourly`-style macros, 6-field seconds forms and 7-field year forms are refused). Whether the five
fields mean something (`61 * * * *`) is croniter's to say: the runner asks it when the task is
written and refuses with the same `TASK_CRON_INVALID` code.

Ad-hoc commands (`qlk submit -- CMD ARGS`, TK-5) are *implicit tasks*: `adhoc_definition` names the
definition `adhoc:<16 hex of its digest>` (a name no user task can have: user names have no `:`),
with no schedule and no policy, so the same command always maps to the same task and revision 1.
"""

from __future__ import annotations

import enum
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from kernel.commands import PolicyDefinition
from kernel.identity import IdentityError, canonical_json
from kernel.specs.codes import Code
from kernel.specs.states import Profile
from kernel.transitions.retry_policy import admission_policy_code

__all__ = [
    "ADHOC_NAME_PREFIX",
    "ARGV_MAX_ITEMS",
    "ARG_MAX_LENGTH",
    "CRON_FIELDS",
    "CRON_MAX_LENGTH",
    "CWD_MAX_LENGTH",
    "DEADLINE_MAX_MS",
    "DEADLINE_MIN_MS",
    "ENV_MAX_ITEMS",
    "ENV_NAME_MAX_LENGTH",
    "ENV_VALUE_MAX_LENGTH",
    "LOCAL_EXECUTOR_TYPE",
    "LOCAL_PROJECT_ID",
    "TASK_EXECUTOR_TYPE",
    "TASK_NAME_MAX_LENGTH",
    "TASK_NAME_RE",
    "TaskDefinition",
    "TaskDefinitionError",
    "TaskExecution",
    "TaskOrigin",
    "TaskRefused",
    "TaskRevision",
    "adhoc_definition",
    "cron_shape_refusal",
    "define_task",
    "normalize_cron",
    "policy_document",
    "task_profile_refusal",
]

#: The executor type of every Run a local task admits (the local POSIX executor; TK-4).
LOCAL_EXECUTOR_TYPE: Final = "local.posix"
# [decision] The executor type of a cluster task Run (issue 17) is the same: it names what runs a
# task's command (an argv executed directly, no shell, by a POSIX process launcher; TK-4), not
# where, and `admit_command` is one admission for both runners (the deterministic fire ids of
# TK-6 do not depend on the profile). A cluster Worker that runs task commands advertises it
# (`qlk worker --executor-type local.posix`); dispatch grants a Run only to a matching Worker (T1).
TASK_EXECUTOR_TYPE: Final = LOCAL_EXECUTOR_TYPE
#: The project id of every local Run (edge/standalone have one project; TK-4).
LOCAL_PROJECT_ID: Final = "local"

# [decision TK-1] A user task name is 1..64 characters `[A-Za-z0-9][A-Za-z0-9._-]*`: safe as a
# command-line argument, a file-name component and a B-01 identity, and free of `:` so the
# implicit ad-hoc names (`adhoc:...`) can never collide with a user's.
TASK_NAME_MAX_LENGTH: Final = 64
TASK_NAME_RE: Final[re.Pattern[str]] = re.compile(
    rf"[A-Za-z0-9][A-Za-z0-9._-]{{0,{TASK_NAME_MAX_LENGTH - 1}}}", re.ASCII
)
ADHOC_NAME_PREFIX: Final = "adhoc:"
_ADHOC_NAME_RE: Final[re.Pattern[str]] = re.compile(r"adhoc:[0-9a-f]{16}", re.ASCII)
_ADHOC_DOMAIN: Final = "ql3-adhoc-task-v1"

# [decision TK-2] Size limits of a definition: bounded rows, bounded launcher input.
ARGV_MAX_ITEMS: Final = 1024
ARG_MAX_LENGTH: Final = 32 * 1024
CWD_MAX_LENGTH: Final = 4096
ENV_MAX_ITEMS: Final = 256
ENV_NAME_MAX_LENGTH: Final = 128
ENV_VALUE_MAX_LENGTH: Final = 32 * 1024
# POSIX portable environment names (IEEE Std 1003.1 §8.1): letters, digits, underscore, no
# leading digit. `=` or NUL in a name would corrupt the environment block.
_ENV_NAME_RE: Final[re.Pattern[str]] = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)

# [decision TK-2] A deadline is a Run's maximum duration from its start: 1 s..7 days. It becomes
# a cancellation intent with reason `timeout` when it passes (B-06, deadline control of O-2).
DEADLINE_MIN_MS: Final = 1_000
DEADLINE_MAX_MS: Final = 7 * 24 * 60 * 60 * 1_000

# [decision TK-3] Cron: exactly 5 fields (minute hour day-of-month month day-of-week), UTC.
CRON_FIELDS: Final = 5
CRON_MAX_LENGTH: Final = 256
_CRON_FIELD_RE: Final[re.Pattern[str]] = re.compile(r"[0-9A-Za-z*/,?#-]+", re.ASCII)


class TaskOrigin(enum.StrEnum):
    """Who wrote the definition: a user (`qlk task add`) or an ad-hoc submission (TK-5)."""

    USER = "user"
    ADHOC = "adhoc"


@dataclass(frozen=True, slots=True)
class TaskRefused:
    """A definition, submission or removal the kernel refuses: a stable `code`, the `field` that
    caused it (`""` when none). Never carries the offending value."""

    code: Code
    field: str = ""


class TaskDefinitionError(ValueError):
    """A `TaskDefinition` constructed with invalid fields (use `define_task` to get a value)."""

    def __init__(self, refused: TaskRefused) -> None:
        super().__init__(f"{refused.field}: {refused.code}")
        self.code = refused.code
        self.field = refused.field


def normalize_cron(text: str) -> str:
    """The stored form of a cron expression: fields separated by one space (TK-3)."""
    return " ".join(text.split())


def cron_shape_refusal(text: object) -> TaskRefused | None:
    """TK-3: `TASK_CRON_INVALID` unless `text` is exactly five whitespace-separated fields of cron
    characters (digits, names, `* / , - ? #`, `L`, `W`). Macros (`@daily`), seconds (6 fields) and
    years (7 fields) are refused; croniter judges the fields' meaning in the runner."""
    refused = TaskRefused(Code.TASK_CRON_INVALID, "cron")
    if not isinstance(text, str) or not text.isascii() or len(text) > CRON_MAX_LENGTH:
        return refused
    fields = text.split()
    if len(fields) != CRON_FIELDS:
        return refused
    if any(_CRON_FIELD_RE.fullmatch(f) is None for f in fields):
        return refused
    return None


def _plain_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text_ok(value: object, max_length: int, *, allow_empty: bool) -> bool:
    """A str of at most `max_length` characters with no NUL (which no argv, path or environment
    entry can carry) and no lone surrogate (it has no UTF-8 form to store or pass)."""
    if not isinstance(value, str) or len(value) > max_length or "\0" in value:
        return False
    if not value and not allow_empty:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _name_refusal(name: object, origin: object) -> TaskRefused | None:
    refused = TaskRefused(Code.TASK_NAME_INVALID, "name")
    if not isinstance(name, str):
        return refused
    pattern = _ADHOC_NAME_RE if origin is TaskOrigin.ADHOC else TASK_NAME_RE
    return None if pattern.fullmatch(name) is not None else refused


def _argv_refusal(argv: object) -> TaskRefused | None:
    refused = TaskRefused(Code.TASK_ARGV_INVALID, "argv")
    if not isinstance(argv, tuple) or not 1 <= len(argv) <= ARGV_MAX_ITEMS:
        return refused
    if not _text_ok(argv[0], ARG_MAX_LENGTH, allow_empty=False):
        return refused  # the program: non-empty
    if not all(_text_ok(a, ARG_MAX_LENGTH, allow_empty=True) for a in argv[1:]):
        return refused
    return None


def _cwd_refusal(cwd: object) -> TaskRefused | None:
    # [decision TK-2] Absolute only: a relative directory would depend on where the runtime
    # process happened to start. The CLI resolves a relative one before defining the task.
    if cwd is None:
        return None
    if not _text_ok(cwd, CWD_MAX_LENGTH, allow_empty=False) or not str(cwd).startswith("/"):
        return TaskRefused(Code.TASK_CWD_INVALID, "cwd")
    return None


def _env_refusal(env: object) -> TaskRefused | None:
    refused = TaskRefused(Code.TASK_ENV_INVALID, "env")
    if not isinstance(env, tuple) or len(env) > ENV_MAX_ITEMS:
        return refused
    previous: str | None = None
    for pair in env:
        if not isinstance(pair, tuple) or len(pair) != 2:
            return refused
        key, value = pair
        if not isinstance(key, str) or len(key) > ENV_NAME_MAX_LENGTH:
            return refused
        if _ENV_NAME_RE.fullmatch(key) is None:
            return refused
        if not _text_ok(value, ENV_VALUE_MAX_LENGTH, allow_empty=True):
            return refused
        # Sorted by name, no duplicates: one stored form per environment (equality = identity).
        if previous is not None and key <= previous:
            return refused
        previous = key
    return None


def _deadline_refusal(deadline_ms: object) -> TaskRefused | None:
    if deadline_ms is None:
        return None
    if not isinstance(deadline_ms, int) or isinstance(deadline_ms, bool):
        return TaskRefused(Code.TASK_DEADLINE_INVALID, "deadline_ms")
    if not DEADLINE_MIN_MS <= deadline_ms <= DEADLINE_MAX_MS:
        return TaskRefused(Code.TASK_DEADLINE_INVALID, "deadline_ms")
    return None


def _policy_refusal(policy: object) -> TaskRefused | None:
    if policy is None:
        return None
    if not isinstance(policy, PolicyDefinition):
        return TaskRefused(Code.INVALID_RUN_RETRY_POLICY, "retry_policy")
    code = admission_policy_code(policy)  # the admission rule itself
    return None if code is None else TaskRefused(code, "retry_policy")


def _refusal(d: TaskDefinition) -> TaskRefused | None:
    origin: object = d.origin  # typed, but a caller may pass anything
    if not isinstance(origin, TaskOrigin):
        return TaskRefused(Code.TASK_NAME_INVALID, "origin")
    checks = (
        _name_refusal(d.name, d.origin),
        _argv_refusal(d.argv),
        _cwd_refusal(d.cwd),
        _env_refusal(d.env),
        None if d.cron is None else cron_shape_refusal(d.cron),
        _deadline_refusal(d.deadline_ms),
        _policy_refusal(d.retry_policy),
    )
    for refused in checks:
        if refused is not None:
            return refused
    if d.cron is not None and d.cron != normalize_cron(d.cron):
        return TaskRefused(Code.TASK_CRON_INVALID, "cron")  # one stored form (define_task makes it)
    if d.origin is TaskOrigin.ADHOC:
        # An implicit task is named by its content and is never scheduled nor retried (TK-5).
        if d.cron is not None:
            return TaskRefused(Code.TASK_CRON_INVALID, "cron")
        if d.retry_policy is not None:
            return TaskRefused(Code.INVALID_RUN_RETRY_POLICY, "retry_policy")
        if d.name != _adhoc_name(d.argv, d.cwd, d.env, d.deadline_ms):
            return TaskRefused(Code.TASK_NAME_INVALID, "name")
        if d.requires_approval:
            return TaskRefused(Code.TASK_APPROVAL_UNSUPPORTED, "requires_approval")
    requires: object = d.requires_approval  # typed, but a caller may pass anything
    if type(requires) is not bool:
        return TaskRefused(Code.TASK_APPROVAL_UNSUPPORTED, "requires_approval")
    if d.requires_approval and d.cron is not None:
        # [decision AA-D4] A scheduled fire has no person to ask: approval is for submissions.
        return TaskRefused(Code.TASK_APPROVAL_UNSUPPORTED, "requires_approval")
    return None


@dataclass(frozen=True, slots=True)
class TaskDefinition:
    """What the user wrote for one revision of a task (TK-1..TK-5). Immutable and validated.

    `env` is a tuple of `(name, value)` pairs sorted by name (`environment()` gives a dict);
    `cron` is the normalized 5-field text or None (no schedule). Equality is the "definition
    differs" test of `qlk task add`: an equal definition is an identical re-add (a no-op).
    `repr` hides argv and env values (they may hold secrets)."""

    name: str
    argv: tuple[str, ...]
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    cron: str | None = None
    deadline_ms: int | None = None
    retry_policy: PolicyDefinition | None = None
    origin: TaskOrigin = TaskOrigin.USER
    # Issue 19: a submission becomes an approval request a person approves or denies.
    requires_approval: bool = False

    def __post_init__(self) -> None:
        refused = _refusal(self)
        if refused is not None:
            raise TaskDefinitionError(refused)

    def __repr__(self) -> str:
        return (
            f"TaskDefinition(name={self.name!r}, argv=<{len(self.argv)} items>, "
            f"env=<{len(self.env)} names>, cron={self.cron!r}, deadline_ms={self.deadline_ms!r}, "
            f"origin={self.origin.value!r})"
        )

    def environment(self) -> dict[str, str]:
        return dict(self.env)

    def document(self) -> dict[str, object]:
        """The canonical document of the definition (what its digest covers)."""
        return {
            "name": self.name,
            "origin": self.origin.value,
            "argv": list(self.argv),
            "cwd": self.cwd,
            "env": dict(self.env),
            "cron": self.cron,
            "deadline_ms": self.deadline_ms,
            "retry_policy": policy_document(self.retry_policy),
            # Only when set, so the digest of every definition written before it is unchanged.
            **({"requires_approval": True} if self.requires_approval else {}),
        }

    @property
    def digest(self) -> str:
        """SHA-256 of the canonical JSON of `document()` (§0.4 canonical JSON, A-2's "task
        definition digest")."""
        return hashlib.sha256(canonical_json(self.document(), field="task")).hexdigest()


def policy_document(policy: PolicyDefinition | None) -> dict[str, object] | None:
    """A policy as a plain JSON object (the form `kernel.decode_provider_policy` reads back)."""
    if policy is None:
        return None
    return {
        "max_attempts": policy.max_attempts,
        "retry_on_lost": policy.retry_on_lost,
        "safety": policy.safety.value,
        "backoff_base_ms": policy.backoff_base_ms,
        "backoff_max_ms": policy.backoff_max_ms,
    }


def _env_tuple(env: object) -> tuple[tuple[str, str], ...] | TaskRefused:
    refused = TaskRefused(Code.TASK_ENV_INVALID, "env")
    if env is None:
        return ()
    if not isinstance(env, Mapping):
        return refused
    try:
        items = list(env.items())
    except Exception:
        return refused
    if not all(isinstance(k, str) for k, _ in items):
        return refused
    return tuple(sorted(items))


def _argv_tuple(argv: object) -> tuple[str, ...] | TaskRefused:
    if isinstance(argv, str | bytes) or not isinstance(argv, Iterable):
        return TaskRefused(Code.TASK_ARGV_INVALID, "argv")  # a string is not an argv
    try:
        return tuple(argv)
    except Exception:
        return TaskRefused(Code.TASK_ARGV_INVALID, "argv")


def _build(
    name: object,
    argv: object,
    *,
    cwd: object,
    env: object,
    cron: object,
    deadline_ms: object,
    retry_policy: object,
    origin: TaskOrigin,
    requires_approval: object = False,
) -> TaskDefinition | TaskRefused:
    argv_t = _argv_tuple(argv)
    if isinstance(argv_t, TaskRefused):
        return argv_t
    env_t = _env_tuple(env)
    if isinstance(env_t, TaskRefused):
        return env_t
    if cron is not None:
        shape = cron_shape_refusal(cron)
        if shape is not None:
            return shape
        cron = normalize_cron(str(cron))
    try:
        return TaskDefinition(
            name=name,  # type: ignore[arg-type]  # checked by __post_init__
            argv=argv_t,
            cwd=cwd,  # type: ignore[arg-type]
            env=env_t,
            cron=cron,
            deadline_ms=deadline_ms,  # type: ignore[arg-type]
            retry_policy=retry_policy,  # type: ignore[arg-type]
            origin=origin,
            requires_approval=requires_approval,  # type: ignore[arg-type]
        )
    except TaskDefinitionError as refused:
        return TaskRefused(refused.code, refused.field)


def task_profile_refusal(definition: TaskDefinition, profile: Profile) -> TaskRefused | None:
    """Whether `profile` can hold `definition`: a task that requires approval needs the
    Approved Action lifecycle, which only `edge` and `standalone` have (SPEC §5.4); the
    cluster profile refuses it with `PROFILE_NOT_SUPPORTED` before anything is written."""
    local = profile in (Profile.EDGE, Profile.STANDALONE)
    if definition.requires_approval and not local:
        return TaskRefused(Code.PROFILE_NOT_SUPPORTED, "requires_approval")
    return None


def define_task(
    name: object,
    argv: object,
    *,
    cwd: object = None,
    env: object = None,
    cron: object = None,
    deadline_ms: object = None,
    retry_policy: object = None,
    requires_approval: object = False,
) -> TaskDefinition | TaskRefused:
    """Validate what a user typed into a `TaskDefinition`, or refuse it (TK-1..TK-3).

    Refusal codes, checked in this order: `TASK_NAME_INVALID` (name), `TASK_ARGV_INVALID`
    (empty argv, an empty program, NUL, too many or too long items), `TASK_CWD_INVALID` (not
    absolute), `TASK_ENV_INVALID` (a name that is not a POSIX portable name, NUL, too many),
    `TASK_CRON_INVALID` (not 5 fields), `TASK_DEADLINE_INVALID` (outside 1 s..7 days),
    `INVALID_RUN_RETRY_POLICY` / `RUN_RETRY_POLICY_UNSAFE` (the admission rules A-3, A-4).
    `env` is any mapping; `argv` any iterable of str but a str itself."""
    if _name_refusal(name, TaskOrigin.USER) is not None:
        return TaskRefused(Code.TASK_NAME_INVALID, "name")
    return _build(
        name,
        argv,
        cwd=cwd,
        env=env,
        cron=cron,
        deadline_ms=deadline_ms,
        retry_policy=retry_policy,
        origin=TaskOrigin.USER,
        requires_approval=requires_approval,
    )


def _adhoc_name(
    argv: tuple[str, ...],
    cwd: str | None,
    env: tuple[tuple[str, str], ...],
    deadline_ms: int | None,
) -> str:
    document = {"argv": list(argv), "cwd": cwd, "env": dict(env), "deadline_ms": deadline_ms}
    try:
        body = canonical_json(document, field="task")
    except IdentityError:
        return ""  # unreachable for validated fields; an empty name is refused
    material = _ADHOC_DOMAIN.encode("utf-8") + b"\0" + body
    return ADHOC_NAME_PREFIX + hashlib.sha256(material).hexdigest()[:16]


def adhoc_definition(
    argv: object, *, cwd: object = None, env: object = None, deadline_ms: object = None
) -> TaskDefinition | TaskRefused:
    """The implicit task of an ad-hoc command (TK-5): named `adhoc:<16 hex>` after its content,
    no schedule, no retry policy. The same command (argv, cwd, env, deadline) is the same task."""
    argv_t = _argv_tuple(argv)
    if isinstance(argv_t, TaskRefused):
        return argv_t
    env_t = _env_tuple(env)
    if isinstance(env_t, TaskRefused):
        return env_t
    for refused in (
        _argv_refusal(argv_t),
        _cwd_refusal(cwd),
        _env_refusal(env_t),
        _deadline_refusal(deadline_ms),
    ):
        if refused is not None:
            return refused
    name = _adhoc_name(argv_t, cwd, env_t, deadline_ms)  # type: ignore[arg-type]
    return _build(
        name,
        argv_t,
        cwd=cwd,
        env=env,
        cron=None,
        deadline_ms=deadline_ms,
        retry_policy=None,
        origin=TaskOrigin.ADHOC,
    )


@dataclass(frozen=True, slots=True)
class TaskExecution:
    """What the launcher needs to start a Run of `(task, revision)`: argv (no shell), the working
    directory (None: the runtime's default), the environment additions, the deadline.
    `repr` hides argv and env values."""

    task: str
    revision: int
    argv: tuple[str, ...]
    cwd: str | None
    env: tuple[tuple[str, str], ...]
    deadline_ms: int | None

    def __repr__(self) -> str:
        return (
            f"TaskExecution(task={self.task!r}, revision={self.revision}, "
            f"argv=<{len(self.argv)} items>, env=<{len(self.env)} names>, "
            f"deadline_ms={self.deadline_ms!r})"
        )

    def environment(self) -> dict[str, str]:
        return dict(self.env)

    def execution_spec(self) -> dict[str, object]:
        """The ExecutionSpec document of a local Run (digest it with
        `kernel.execution_spec_digest`)."""
        return {
            "task": self.task,
            "revision": self.revision,
            "argv": list(self.argv),
            "cwd": self.cwd,
            "env": dict(self.env),
            "deadline_ms": self.deadline_ms,
        }


@dataclass(frozen=True, slots=True)
class TaskRevision:
    """One immutable revision of a task: its definition, its number (1, 2, ...) and when it was
    written. Runs name it by `(task_id, task_revision)`."""

    definition: TaskDefinition
    revision: int
    created_at_ms: int

    def __post_init__(self) -> None:
        if not isinstance(self.definition, TaskDefinition):
            raise ValueError("definition: must be a TaskDefinition")
        if not _plain_int(self.revision) or self.revision < 1:
            raise ValueError("revision: must be an integer >= 1")
        if not _plain_int(self.created_at_ms) or self.created_at_ms < 0:
            raise ValueError("created_at_ms: must be an integer >= 0")

    @property
    def name(self) -> str:
        return self.definition.name

    @property
    def argv(self) -> tuple[str, ...]:
        return self.definition.argv

    @property
    def cwd(self) -> str | None:
        return self.definition.cwd

    @property
    def env(self) -> tuple[tuple[str, str], ...]:
        return self.definition.env

    @property
    def cron(self) -> str | None:
        return self.definition.cron

    @property
    def deadline_ms(self) -> int | None:
        return self.definition.deadline_ms

    @property
    def retry_policy(self) -> PolicyDefinition | None:
        return self.definition.retry_policy

    @property
    def origin(self) -> TaskOrigin:
        return self.definition.origin

    def execution(self) -> TaskExecution:
        d = self.definition
        return TaskExecution(d.name, self.revision, d.argv, d.cwd, d.env, d.deadline_ms)
