"""The approval domain's commands (issue 19, decision AA-D1): one per row of `ACTION_TABLE`.

Every command names its action by `action_id`; none carries time (the observation time is an
input of the transition). A person is named by a short printable text (`requested_by`,
`decided_by`): who asked, who approved or denied (recorded in the action's Events).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import ClassVar, Final, TypeAlias

from kernel.commands import AdmitRun, CommandError
from kernel.identity import is_portable_id
from kernel.specs.approved_action import ActionCommandName

__all__ = [
    "ACTION_COMMAND_TYPES",
    "ACTION_ID_PREFIX",
    "PERSON_MAX_LENGTH",
    "ActionCommand",
    "ApproveAction",
    "ClaimAction",
    "DenyAction",
    "RequestApproval",
    "ResolveAction",
    "StartAction",
    "approval_id",
    "person_refusal",
]

#: The longest name a person is recorded under.
PERSON_MAX_LENGTH: Final = 64


#: The prefix of an action id (decision AA-D3): an action is named after the Run it will admit.
ACTION_ID_PREFIX: Final = "apr-"
_RUN_PREFIX: Final = "run-"


def approval_id(run_id: str) -> str:
    """The id of the approval request for the Run `run_id` (decision AA-D3): `apr-` and the
    Run id's random part for a CLI Run id (`run-<32 hex>`), else `apr-` and 32 hex of the Run
    id's SHA-256. Deterministic, so a submission replayed with the same ids replays the request."""
    if run_id.startswith(_RUN_PREFIX) and len(run_id) == len(_RUN_PREFIX) + 32:
        return ACTION_ID_PREFIX + run_id[len(_RUN_PREFIX) :]
    return ACTION_ID_PREFIX + hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:32]


def person_refusal(value: object) -> str | None:
    """Why `value` cannot name a person (None: it can): 1..64 printable characters."""
    if not isinstance(value, str) or not 1 <= len(value) <= PERSON_MAX_LENGTH:
        return f"must be 1..{PERSON_MAX_LENGTH} characters"
    if not value.isprintable() or value != value.strip():
        return "must be printable, without leading or trailing space"
    return None


def _action_id(value: object) -> None:
    if not isinstance(value, str) or not is_portable_id(value):
        raise CommandError("action_id", "must be a portable id")


def _person(value: object, field: str) -> None:
    why = person_refusal(value)
    if why is not None:
        raise CommandError(field, why)


@dataclass(frozen=True, slots=True)
class RequestApproval:
    """Create a `pending` action that, once approved, makes exactly `admission`."""

    name: ClassVar[str] = ActionCommandName.REQUEST_APPROVAL.value
    action_id: str
    admission: AdmitRun
    requested_by: str

    def __post_init__(self) -> None:
        _action_id(self.action_id)
        if not isinstance(self.admission, AdmitRun):
            raise CommandError("admission", "must be an AdmitRun")
        _person(self.requested_by, "requested_by")


@dataclass(frozen=True, slots=True)
class _Decision:
    """A person's decision on a `pending` action."""

    action_id: str
    decided_by: str

    def __post_init__(self) -> None:
        _action_id(self.action_id)
        _person(self.decided_by, "decided_by")


@dataclass(frozen=True, slots=True)
class ApproveAction(_Decision):
    name: ClassVar[str] = ActionCommandName.APPROVE_ACTION.value


@dataclass(frozen=True, slots=True)
class DenyAction(_Decision):
    name: ClassVar[str] = ActionCommandName.DENY_ACTION.value


@dataclass(frozen=True, slots=True)
class _ByRuntime:
    """A step the runtime takes on an action, named by its id alone."""

    action_id: str

    def __post_init__(self) -> None:
        _action_id(self.action_id)


@dataclass(frozen=True, slots=True)
class ClaimAction(_ByRuntime):
    """The dispatcher's start barrier: `approved -> starting`, committed before the start."""

    name: ClassVar[str] = ActionCommandName.CLAIM_ACTION.value


@dataclass(frozen=True, slots=True)
class StartAction(_ByRuntime):
    """The dispatcher's start: admit the Run and end the action, in one transaction."""

    name: ClassVar[str] = ActionCommandName.START_ACTION.value


@dataclass(frozen=True, slots=True)
class ResolveAction(_ByRuntime):
    """The reconciler's resolution of an action left `starting`, from the Run's facts only."""

    name: ClassVar[str] = ActionCommandName.RESOLVE_ACTION.value


ActionCommand: TypeAlias = (
    RequestApproval | ApproveAction | DenyAction | ClaimAction | StartAction | ResolveAction
)

ACTION_COMMAND_TYPES: Final = (
    RequestApproval,
    ApproveAction,
    DenyAction,
    ClaimAction,
    StartAction,
    ResolveAction,
)
