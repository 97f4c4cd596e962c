"""Strict decoding (and encoding) of Workflow commands from plain mappings (SPEC §4, §7).

The Workflow commands are their own domain (decision WF-1), so `kernel.codec.decode_command`
keeps knowing only the Run commands and answers a Workflow name with "unknown command name".
This module is its twin for `kernel.workflow.commands`: the same strict rules (an unknown
member, a wrong type or a bad value raises `CommandError` naming the field; nested values such
as `PinnedStep`, `LocalReceipt` and the evidence union are decoded the same way), and its
encoding is the exact inverse, so a trace can carry Workflow steps (SPEC §7, component
`workflow`).
"""

from __future__ import annotations

import typing
from collections.abc import Mapping
from typing import Final

from kernel.codec import (
    SecretDecoder,
    SecretEncoder,
    _decode_dataclass,
    _digest_only,
    _encode,
    _raw_secret,
)
from kernel.commands import CommandError
from kernel.workflow.commands import WorkflowCommand
from kernel.workflow.transitions import WORKFLOW_COMMAND_TYPES

__all__ = [
    "WORKFLOW_COMMANDS_BY_NAME",
    "decode_workflow_command",
    "encode_workflow_command",
    "is_workflow_command",
]

#: Every Workflow command type by its stable wire name (`admit_workflow`, `admit_task`, ...).
#: None of them shares a name with a Run command, so a trace names either domain unambiguously.
WORKFLOW_COMMANDS_BY_NAME: Final[Mapping[str, type]] = {
    typing.cast(str, getattr(cls, "name")): cls  # noqa: B009 - a ClassVar of every command
    for cls in WORKFLOW_COMMAND_TYPES
}


def is_workflow_command(value: object) -> typing.TypeGuard[WorkflowCommand]:
    """Whether `value` is a Workflow command (the engine routes it to `execute_workflow`)."""
    return isinstance(value, WORKFLOW_COMMAND_TYPES)


def decode_workflow_command(
    name: str, args: Mapping[str, object], *, decode_secret: SecretDecoder = _raw_secret
) -> WorkflowCommand:
    """Decode one Workflow command strictly; `CommandError` names the offending field. No
    Workflow command carries a capability (the callback token is a digest already), so
    `decode_secret` is only passed through for symmetry with `kernel.codec.decode_command`."""
    command_type = WORKFLOW_COMMANDS_BY_NAME.get(name)
    if command_type is None:
        raise CommandError("command", "unknown command name")
    if not isinstance(args, Mapping):
        raise CommandError(name, "arguments must be an object")
    return typing.cast(WorkflowCommand, _decode_dataclass(command_type, args, "", decode_secret))


def encode_workflow_command(
    command: WorkflowCommand, *, encode_secret: SecretEncoder = _digest_only
) -> tuple[str, dict[str, object]]:
    """The inverse of `decode_workflow_command`: the name and the arguments as plain JSON
    values (tuples as arrays, enums as their values, evidence with its `kind`)."""
    if not is_workflow_command(command):
        raise CommandError("command", "not a Workflow command")
    return command.name, typing.cast(dict[str, object], _encode(command, encode_secret))
