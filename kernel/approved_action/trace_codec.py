"""Strict decoding (and encoding) of the approval domain's commands from plain mappings (SPEC §7
component `approved_action`; issue 19, decision AA-D1).

The twin of `kernel.workflow.codec` for `kernel.approved_action.commands`: an unknown member, a
wrong type or a bad value raises `CommandError` naming the field, and encoding is the exact
inverse, so a conformance trace can carry approval steps. None of the six names is a Run or a
Workflow command's name, so a trace names the domain unambiguously.

`request_approval` holds the Run admission it will make. Its arguments carry that admission as
`admit_run`'s arguments (`admission`), decoded by `kernel.codec.decode_command` with the same
A-1 rule: a policy member inside them is the caller bringing its own policy, refused with
`Rejected(RUN_RETRY_POLICY_NOT_ADMISSIBLE)` before any store sees it. The admission provider's
policy travels beside the arguments, as for `admit_run` (`provider_policy`, A-2).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Final

from kernel.approved_action.commands import (
    ACTION_COMMAND_TYPES,
    ActionCommand,
    RequestApproval,
)
from kernel.codec import decode_command, encode_command
from kernel.commands import AdmitRun, CommandError, PolicyDefinition
from kernel.outcomes import Rejected

__all__ = [
    "ACTION_COMMANDS_BY_NAME",
    "decode_action_command",
    "encode_action_command",
    "is_action_command",
]

#: Every approval-domain command type by its wire name (`request_approval`, ...).
ACTION_COMMANDS_BY_NAME: Final[Mapping[str, type]] = {
    typing.cast(str, getattr(cls, "name")): cls  # noqa: B009 - a ClassVar of every command
    for cls in ACTION_COMMAND_TYPES
}

#: The members of each command's arguments, as the wire carries them (`admission` an object).
_MEMBERS: Final[Mapping[str, frozenset[str]]] = {
    "request_approval": frozenset({"action_id", "admission", "requested_by"}),
    "approve_action": frozenset({"action_id", "decided_by"}),
    "deny_action": frozenset({"action_id", "decided_by"}),
    "claim_action": frozenset({"action_id"}),
    "start_action": frozenset({"action_id"}),
    "resolve_action": frozenset({"action_id"}),
}


def is_action_command(value: object) -> typing.TypeGuard[ActionCommand]:
    """Whether `value` is an approval-domain command (the engine's `execute_action`)."""
    return isinstance(value, ACTION_COMMAND_TYPES)


def _string(args: Mapping[str, object], name: str) -> str:
    value = args[name]
    if not isinstance(value, str):
        raise CommandError(name, "must be a string")
    return value


def decode_action_command(
    name: str,
    args: Mapping[str, object],
    *,
    provider_policy: PolicyDefinition | None = None,
) -> ActionCommand | Rejected:
    """Decode one approval-domain command strictly; `CommandError` names the offending field.
    `provider_policy` is the admission provider's policy of a `request_approval`'s admission
    and must be None for every other command. A policy member inside the admission is refused
    as A-1 refuses it in `admit_run` (a `Rejected` value, not an error)."""
    command_type = ACTION_COMMANDS_BY_NAME.get(name)
    if command_type is None:
        raise CommandError("command", "unknown command name")
    if not isinstance(args, Mapping):
        raise CommandError(name, "arguments must be an object")
    members = _MEMBERS[name]
    for key in args:
        if key not in members:
            raise CommandError(str(key), "unknown member")
    for key in sorted(members):
        if key not in args:
            raise CommandError(key, "missing member")
    if provider_policy is not None and command_type is not RequestApproval:
        raise CommandError("provider_policy", "only request_approval takes a provider policy")
    if command_type is RequestApproval:
        raw = args["admission"]
        if not isinstance(raw, Mapping):
            raise CommandError("admission", "must be an object")
        try:
            admission = decode_command("admit_run", raw, provider_policy=provider_policy)
        except CommandError as exc:
            raise CommandError(f"admission.{exc.field}", exc.reason) from None
        if isinstance(admission, Rejected):
            return admission
        assert isinstance(admission, AdmitRun)
        return RequestApproval(_string(args, "action_id"), admission, _string(args, "requested_by"))
    values = {key: _string(args, key) for key in sorted(members)}
    return typing.cast(ActionCommand, command_type(**values))


def encode_action_command(
    command: ActionCommand,
) -> tuple[str, dict[str, object], dict[str, object] | None]:
    """The inverse of `decode_action_command`: the name, the arguments as plain JSON values
    and, for a `request_approval` whose admission has one, the provider's policy (else None)."""
    if not is_action_command(command):
        raise CommandError("command", "not an approval-domain command")
    if isinstance(command, RequestApproval):
        _, admission = encode_command(command.admission)
        policy = admission.pop("provider_policy", None)
        args: dict[str, object] = {
            "action_id": command.action_id,
            "admission": admission,
            "requested_by": command.requested_by,
        }
        return command.name, args, typing.cast(dict[str, object] | None, policy)
    out = {
        key: typing.cast(object, getattr(command, key)) for key in sorted(_MEMBERS[command.name])
    }
    return command.name, out, None
