"""Commands of the Run domain (SPEC §1.6-§1.9, §2): frozen, validated values.

A command validates its own shape when it is constructed and raises `CommandError` (a
`ValueError` naming the field) for bad input, so every transition receives well-formed input
and can be total over it (RUN-05). Domain refusals are never raised: they are `Rejected` values
returned by the transitions. Raw tokens only travel inside `Secret`, whose repr is redacted (S-1).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

from kernel.entities import WorkerSession
from kernel.evidence import (
    CompletedEvidence,
    Evidence,
    LiveEvidence,
    NotRunningEvidence,
    UnknownEvidence,
)
from kernel.identity import (
    IdentityError,
    Secret,
    is_sha256_hex,
    validate_other_id,
    validate_portable_id,
)
from kernel.specs.states import (
    Actor,
    CancelReason,
    CompletionOutcome,
    Profile,
    RunKind,
    RunOwner,
    Safety,
    StopResult,
    UnknownReason,
    WorkerSessionStatus,
)


class CommandError(ValueError):
    """Malformed command input. Names the field; never echoes a token (S-1)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _portable(value: object, field: str) -> None:
    try:
        validate_portable_id(value, field)
    except IdentityError as exc:
        raise CommandError(field, f"invalid portable identity ({exc.reason})") from None


def _other(value: object, field: str) -> None:
    try:
        validate_other_id(value, field)
    except IdentityError as exc:
        raise CommandError(field, f"invalid identifier ({exc.reason})") from None


def _int(value: object, field: str, minimum: int = 0) -> None:
    # bool is an int in Python; a JSON `true` must not pass as a version or time.
    if not isinstance(value, int) or isinstance(value, bool):
        raise CommandError(field, "must be an integer")
    if value < minimum:
        raise CommandError(field, f"must be >= {minimum}")


def _opt_int(value: object, field: str, minimum: int = 0) -> None:
    if value is not None:
        _int(value, field, minimum)


def _enum(value: object, enum_type: type, field: str) -> None:
    if not isinstance(value, enum_type):
        raise CommandError(field, f"must be a {enum_type.__name__}")


def _bool(value: object, field: str) -> None:
    if not isinstance(value, bool):
        raise CommandError(field, "must be a boolean")


def _secret(value: object, field: str) -> None:
    if not isinstance(value, Secret):
        raise CommandError(field, "must be a Secret")


def _str(value: object, field: str, max_length: int = 256) -> None:
    if not isinstance(value, str) or not value or len(value) > max_length:
        raise CommandError(field, f"must be a non-empty string of at most {max_length} characters")


def check_worker_session(worker: object, field: str = "worker") -> None:
    if not isinstance(worker, WorkerSession):
        raise CommandError(field, "must be a WorkerSession")
    _other(worker.worker_id, f"{field}.worker_id")
    _other(worker.session_id, f"{field}.session_id")
    _int(worker.generation, f"{field}.generation")
    _enum(worker.status, WorkerSessionStatus, f"{field}.status")
    _int(worker.session_expires_at_ms, f"{field}.session_expires_at_ms")
    if not isinstance(worker.executor_types, tuple):
        raise CommandError(f"{field}.executor_types", "must be a tuple of strings")
    for item in worker.executor_types:
        _str(item, f"{field}.executor_types")


@dataclass(frozen=True, slots=True)
class PolicyDefinition:
    """A retry policy as returned by the trusted admission provider (A-2). Its limits (A-3) are
    checked by `admit_run`, which returns `Rejected(INVALID_RUN_RETRY_POLICY)`, not here."""

    max_attempts: int
    retry_on_lost: bool
    safety: Safety
    backoff_base_ms: int
    backoff_max_ms: int

    def __post_init__(self) -> None:
        _int(self.max_attempts, "policy.max_attempts", minimum=-(2**63))
        _bool(self.retry_on_lost, "policy.retry_on_lost")
        _enum(self.safety, Safety, "policy.safety")
        _int(self.backoff_base_ms, "policy.backoff_base_ms", minimum=-(2**63))
        _int(self.backoff_max_ms, "policy.backoff_max_ms", minimum=-(2**63))


@dataclass(frozen=True, slots=True)
class Fence:
    """The fence every Worker command carries (SPEC §1.7)."""

    worker_id: str
    worker_session_id: str
    worker_generation: int
    lease_generation: int
    lease_token: Secret
    expected_version: int

    def __post_init__(self) -> None:
        _other(self.worker_id, "fence.worker_id")
        _other(self.worker_session_id, "fence.worker_session_id")
        _int(self.worker_generation, "fence.worker_generation")
        _int(self.lease_generation, "fence.lease_generation", 1)
        _secret(self.lease_token, "fence.lease_token")
        _int(self.expected_version, "fence.expected_version", 1)


@dataclass(frozen=True, slots=True)
class LocalReceipt:
    """An immutable completion receipt as read by the runner (L3). The runner hashes the raw
    receipt token; the kernel sees only `token_sha256`."""

    run_id: str
    attempt_id: str
    callback_sequence: int
    token_sha256: str
    outcome: CompletionOutcome
    started_at_ms: int
    exit_code: int | None = None

    def __post_init__(self) -> None:
        _portable(self.run_id, "receipt.run_id")
        _portable(self.attempt_id, "receipt.attempt_id")
        _int(self.callback_sequence, "receipt.callback_sequence")
        if not isinstance(self.token_sha256, str) or not is_sha256_hex(self.token_sha256):
            raise CommandError("receipt.token_sha256", "must be 64 lowercase hex characters")
        _enum(self.outcome, CompletionOutcome, "receipt.outcome")
        _int(self.started_at_ms, "receipt.started_at_ms")
        _opt_int(self.exit_code, "receipt.exit_code", minimum=-(2**31))


class _Command:
    """Marker base: every command has a stable `name` and addresses one Run."""

    __slots__ = ()
    name: ClassVar[str]
    run_id: str


@dataclass(frozen=True, slots=True)
class AdmitRun(_Command):
    """A-1..A-5. The command type has no policy member; a decoded mapping that carries one is
    refused by `kernel.codec` with `RUN_RETRY_POLICY_NOT_ADMISSIBLE` (A-1)."""

    name: ClassVar[str] = "admit_run"
    run_id: str
    attempt_id: str
    project_id: str
    task_id: str
    task_revision: int
    executor_type: str
    provider_policy: PolicyDefinition | None = None
    kind: RunKind = RunKind.ORDINARY
    owner: RunOwner = RunOwner.RUNTIME
    actor: Actor = Actor.TRIGGER

    def __post_init__(self) -> None:
        _portable(self.run_id, "run_id")
        _portable(self.attempt_id, "attempt_id")
        _other(self.project_id, "project_id")
        _other(self.task_id, "task_id")
        _int(self.task_revision, "task_revision", 1)
        _str(self.executor_type, "executor_type", 128)
        if self.provider_policy is not None and not isinstance(
            self.provider_policy, PolicyDefinition
        ):
            raise CommandError("provider_policy", "must be a PolicyDefinition")
        _enum(self.kind, RunKind, "kind")
        _enum(self.owner, RunOwner, "owner")
        _enum(self.actor, Actor, "actor")


@dataclass(frozen=True, slots=True)
class CreateRun(_Command):
    """First phase of a two-phase admission: a `created` Run with no Attempt (§1.2, B-07)."""

    name: ClassVar[str] = "create_run"
    run_id: str
    project_id: str
    task_id: str
    task_revision: int
    executor_type: str
    kind: RunKind = RunKind.ORDINARY
    owner: RunOwner = RunOwner.RUNTIME

    def __post_init__(self) -> None:
        _portable(self.run_id, "run_id")
        _other(self.project_id, "project_id")
        _other(self.task_id, "task_id")
        _int(self.task_revision, "task_revision", 1)
        _str(self.executor_type, "executor_type", 128)
        _enum(self.kind, RunKind, "kind")
        _enum(self.owner, RunOwner, "owner")


def _attempt_command(cmd: _AttemptCommand) -> None:
    _portable(cmd.run_id, "run_id")
    _portable(cmd.attempt_id, "attempt_id")


class _AttemptCommand(_Command):
    __slots__ = ()
    attempt_id: str


class _FencedCommand(_AttemptCommand):
    __slots__ = ()
    fence: Fence
    worker: WorkerSession


def _fenced(cmd: _FencedCommand) -> None:
    _attempt_command(cmd)
    if not isinstance(cmd.fence, Fence):
        raise CommandError("fence", "must be a Fence")
    check_worker_session(cmd.worker)


@dataclass(frozen=True, slots=True)
class GrantLease(_AttemptCommand):
    """T1: the dispatcher grants a lease on a pristine or re-grantable `claimed` Attempt."""

    name: ClassVar[str] = "grant_lease"
    run_id: str
    attempt_id: str
    worker: WorkerSession
    lease_token: Secret
    lease_duration_ms: int

    def __post_init__(self) -> None:
        _attempt_command(self)
        check_worker_session(self.worker)
        _secret(self.lease_token, "lease_token")
        _int(self.lease_duration_ms, "lease_duration_ms")


@dataclass(frozen=True, slots=True)
class AcknowledgeStarting(_FencedCommand):
    """T2, T2r, T2x."""

    name: ClassVar[str] = "acknowledge_starting"
    run_id: str
    attempt_id: str
    fence: Fence
    worker: WorkerSession

    def __post_init__(self) -> None:
        _fenced(self)


@dataclass(frozen=True, slots=True)
class RenewLease(_FencedCommand):
    """T3."""

    name: ClassVar[str] = "renew_lease"
    run_id: str
    attempt_id: str
    fence: Fence
    worker: WorkerSession
    lease_duration_ms: int

    def __post_init__(self) -> None:
        _fenced(self)
        _int(self.lease_duration_ms, "lease_duration_ms")


@dataclass(frozen=True, slots=True)
class AcknowledgeRunning(_FencedCommand):
    """T4, T4r."""

    name: ClassVar[str] = "acknowledge_running"
    run_id: str
    attempt_id: str
    fence: Fence
    worker: WorkerSession
    executor_handle: str
    started_at_ms: int

    def __post_init__(self) -> None:
        _fenced(self)
        _str(self.executor_handle, "executor_handle")
        _int(self.started_at_ms, "started_at_ms")


@dataclass(frozen=True, slots=True)
class FailStart(_FencedCommand):
    """T5 (B-18): a start failure fails the Run with `START_FAILED`; no retry."""

    name: ClassVar[str] = "fail_start"
    run_id: str
    attempt_id: str
    fence: Fence
    worker: WorkerSession
    failure_code: str = "START_FAILED"

    def __post_init__(self) -> None:
        _fenced(self)
        _str(self.failure_code, "failure_code", 128)


@dataclass(frozen=True, slots=True)
class CompleteWithLease(_FencedCommand):
    """T6, T6r (exact replay rule)."""

    name: ClassVar[str] = "complete_with_lease"
    run_id: str
    attempt_id: str
    fence: Fence
    worker: WorkerSession
    callback_sequence: int
    outcome: CompletionOutcome
    exit_code: int | None = None

    def __post_init__(self) -> None:
        _fenced(self)
        _int(self.callback_sequence, "callback_sequence", 1)
        _enum(self.outcome, CompletionOutcome, "outcome")
        _opt_int(self.exit_code, "exit_code", minimum=-(2**31))


@dataclass(frozen=True, slots=True)
class ExpireWithLease(_AttemptCommand):
    """T7..T10: server-owned expiry of one lease generation; `profile` selects E-1."""

    name: ClassVar[str] = "expire_with_lease"
    run_id: str
    attempt_id: str
    lease_generation: int
    profile: Profile

    def __post_init__(self) -> None:
        _attempt_command(self)
        _int(self.lease_generation, "lease_generation", 1)
        _enum(self.profile, Profile, "profile")


@dataclass(frozen=True, slots=True)
class RequestCancel(_Command):
    """§1.9: record a cancellation (or deadline, B-06) intent."""

    name: ClassVar[str] = "request_cancel"
    run_id: str
    reason: CancelReason
    actor: Actor = Actor.USER

    def __post_init__(self) -> None:
        _portable(self.run_id, "run_id")
        _enum(self.reason, CancelReason, "reason")
        _enum(self.actor, Actor, "actor")


@dataclass(frozen=True, slots=True)
class ConvergeCancel(_Command):
    """§1.9: finish a cancelled Run that has no live execution."""

    name: ClassVar[str] = "converge_cancel"
    run_id: str

    def __post_init__(self) -> None:
        _portable(self.run_id, "run_id")


@dataclass(frozen=True, slots=True)
class LostRetryStep(_Command):
    """§1.8.1: one lost-retry decision; `new_attempt_id` is used only by R5 (requeue)."""

    name: ClassVar[str] = "lost_retry_step"
    run_id: str
    new_attempt_id: str

    def __post_init__(self) -> None:
        _portable(self.run_id, "run_id")
        _portable(self.new_attempt_id, "new_attempt_id")


@dataclass(frozen=True, slots=True)
class ActivateLocal(_AttemptCommand):
    """L1 (§1.8.3): commit the start barrier of a local Attempt before its spawn."""

    name: ClassVar[str] = "activate_local"
    run_id: str
    attempt_id: str
    local_executor_type: str
    callback_sequence: int
    callback_token_sha256: str

    def __post_init__(self) -> None:
        _attempt_command(self)
        _str(self.local_executor_type, "local_executor_type", 128)
        _int(self.callback_sequence, "callback_sequence", 1)
        if not isinstance(self.callback_token_sha256, str) or not is_sha256_hex(
            self.callback_token_sha256
        ):
            raise CommandError("callback_token_sha256", "must be 64 lowercase hex characters")


@dataclass(frozen=True, slots=True)
class RecordLocalHandle(_AttemptCommand):
    """L2: record the durable executor handle and its start time (the handle fact, §4.7)."""

    name: ClassVar[str] = "record_local_handle"
    run_id: str
    attempt_id: str
    executor_handle: str
    started_at_ms: int

    def __post_init__(self) -> None:
        _attempt_command(self)
        _str(self.executor_handle, "executor_handle")
        _int(self.started_at_ms, "started_at_ms")


@dataclass(frozen=True, slots=True)
class CompleteLocal(_AttemptCommand):
    """L3: apply an authenticated completion receipt."""

    name: ClassVar[str] = "complete_local"
    run_id: str
    attempt_id: str
    receipt: LocalReceipt

    def __post_init__(self) -> None:
        _attempt_command(self)
        if not isinstance(self.receipt, LocalReceipt):
            raise CommandError("receipt", "must be a LocalReceipt")


@dataclass(frozen=True, slots=True)
class RecordLocalStop(_AttemptCommand):
    """L4, L5: a conclusive stop of the recorded handle under a cancellation intent."""

    name: ClassVar[str] = "record_local_stop"
    run_id: str
    attempt_id: str
    result: StopResult

    def __post_init__(self) -> None:
        _attempt_command(self)
        _enum(self.result, StopResult, "result")


def _check_evidence(evidence: object, field: str = "evidence") -> None:
    if isinstance(evidence, CompletedEvidence):
        _enum(evidence.outcome, CompletionOutcome, f"{field}.outcome")
        _int(evidence.callback_sequence, f"{field}.callback_sequence")
        _opt_int(evidence.exit_code, f"{field}.exit_code", minimum=-(2**31))
        _opt_int(evidence.started_at_ms, f"{field}.started_at_ms")
    elif isinstance(evidence, UnknownEvidence):
        _enum(evidence.reason, UnknownReason, f"{field}.reason")
    elif not isinstance(evidence, LiveEvidence | NotRunningEvidence):
        raise CommandError(field, "must be an Evidence value")


@dataclass(frozen=True, slots=True)
class RecoverLocalStartup(_AttemptCommand):
    """§2.2: resolve one local startup recovery candidate with its evidence."""

    name: ClassVar[str] = "recover_local_startup"
    run_id: str
    attempt_id: str
    evidence: Evidence

    def __post_init__(self) -> None:
        _attempt_command(self)
        _check_evidence(self.evidence)


@dataclass(frozen=True, slots=True)
class FailOrphanedCreated(_Command):
    """§2.2 (B-30): a `created` Run from before this process started can have no execution."""

    name: ClassVar[str] = "fail_orphaned_created"
    run_id: str
    process_started_at_ms: int

    def __post_init__(self) -> None:
        _portable(self.run_id, "run_id")
        _int(self.process_started_at_ms, "process_started_at_ms")


@dataclass(frozen=True, slots=True)
class RecoverRuntime(_AttemptCommand):
    """§2.3: resolve one cluster runtime recovery candidate. `evidence` is required for
    `starting`/`running` Attempts and ignored for an expired non-pristine `claimed` one."""

    name: ClassVar[str] = "recover_runtime"
    run_id: str
    attempt_id: str
    evidence: Evidence | None = None

    def __post_init__(self) -> None:
        _attempt_command(self)
        if self.evidence is not None:
            _check_evidence(self.evidence)


Command = (
    AdmitRun
    | CreateRun
    | GrantLease
    | AcknowledgeStarting
    | RenewLease
    | AcknowledgeRunning
    | FailStart
    | CompleteWithLease
    | ExpireWithLease
    | RequestCancel
    | ConvergeCancel
    | LostRetryStep
    | ActivateLocal
    | RecordLocalHandle
    | CompleteLocal
    | RecordLocalStop
    | RecoverLocalStartup
    | FailOrphanedCreated
    | RecoverRuntime
)

COMMAND_TYPES: tuple[type[_Command], ...] = (
    AdmitRun,
    CreateRun,
    GrantLease,
    AcknowledgeStarting,
    RenewLease,
    AcknowledgeRunning,
    FailStart,
    CompleteWithLease,
    ExpireWithLease,
    RequestCancel,
    ConvergeCancel,
    LostRetryStep,
    ActivateLocal,
    RecordLocalHandle,
    CompleteLocal,
    RecordLocalStop,
    RecoverLocalStartup,
    FailOrphanedCreated,
    RecoverRuntime,
)
COMMANDS_BY_NAME: dict[str, type[_Command]] = {c.name: c for c in COMMAND_TYPES}


def field_names(command_type: type[_Command]) -> tuple[str, ...]:
    return tuple(f.name for f in fields(command_type))  # type: ignore[arg-type]
