"""Strict decoding (and encoding) of commands from plain mappings (SPEC §1.6 A-1, B-12).

API handlers, traces and CLIs receive commands as JSON-like mappings. Decoding is strict: an
unknown member, a wrong type or a bad value raises `CommandError` naming the field (nothing is
written, nothing is lost: the caller still holds its input). A Run command that carries a retry
policy member is refused with `RUN_RETRY_POLICY_NOT_ADMISSIBLE` (A-1): the policy only ever
comes from the trusted admission provider, passed separately as `provider_policy`.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Union, get_args, get_origin, get_type_hints

from kernel.commands import (
    COMMANDS_BY_NAME,
    AdmitRun,
    Command,
    CommandError,
    CreateRun,
    PolicyDefinition,
)
from kernel.evidence import CompletedEvidence, LiveEvidence, NotRunningEvidence, UnknownEvidence
from kernel.identity import IdentityError, Secret
from kernel.outcomes import Rejected
from kernel.specs.codes import Code

# any of these in a Run command means the caller tried to bring its own policy.
POLICY_MEMBERS = frozenset(
    {
        "retry_policy",
        "policy",
        "provider_policy",
        "max_attempts",
        "retry_on_lost",
        "safety",
        "backoff_base_ms",
        "backoff_max_ms",
        "next_attempt_at_ms",
    }
)

# Commands that create a Run from a caller's request (A-1 applies to both admission phases).
RUN_COMMANDS: frozenset[type] = frozenset({AdmitRun, CreateRun})

_EVIDENCE: dict[str, type] = {
    "completed": CompletedEvidence,
    "live": LiveEvidence,
    "not_running": NotRunningEvidence,
    "unknown": UnknownEvidence,
}

SecretDecoder = Callable[[object, str], Secret]
SecretEncoder = Callable[[Secret], object]


def _raw_secret(value: object, field: str) -> Secret:
    try:
        return Secret.of(value, field)
    except IdentityError:
        raise CommandError(field, "must be a valid capability token") from None


def _digest_only(secret: Secret) -> object:
    # S-1: by default nothing that leaves the process carries the raw capability.
    return {"sha256": secret.digest()}


def decode_command(
    name: str,
    args: Mapping[str, object],
    *,
    provider_policy: PolicyDefinition | None = None,
    decode_secret: SecretDecoder = _raw_secret,
) -> Command | Rejected:
    """Decode one command. `provider_policy` is the admission provider's result for an
    `admit_run` (A-2) and must be `None` for every other command."""
    command_type = COMMANDS_BY_NAME.get(name)
    if command_type is None:
        raise CommandError("command", "unknown command name")
    if not isinstance(args, Mapping):
        raise CommandError(name, "arguments must be an object")
    if command_type in RUN_COMMANDS and POLICY_MEMBERS & set(args):
        return Rejected(Code.RUN_RETRY_POLICY_NOT_ADMISSIBLE)
    if provider_policy is not None and command_type is not AdmitRun:
        raise CommandError("provider_policy", "only admit_run takes a provider policy")
    value = typing.cast(Command, _decode_dataclass(command_type, args, "", decode_secret))
    if isinstance(value, AdmitRun) and provider_policy is not None:
        value = dataclasses.replace(value, provider_policy=provider_policy)
    return value


def decode_provider_policy(data: Mapping[str, object]) -> PolicyDefinition:
    """Decode the admission provider's policy (A-2) strictly, like a command."""
    value = _decode_dataclass(PolicyDefinition, data, "provider_policy.", _raw_secret)
    return typing.cast(PolicyDefinition, value)


@functools.cache
def _shape(cls: type) -> tuple[dict[str, Any], dict[str, dataclasses.Field[Any]]]:
    """A dataclass's resolved type hints and init fields. Cached: resolving string annotations
    is most of a decode's cost, and the command classes never change."""
    return get_type_hints(cls), {f.name: f for f in dataclasses.fields(cls) if f.init}


def _decode_dataclass(cls: type, data: object, prefix: str, decode_secret: SecretDecoder) -> object:
    if not isinstance(data, Mapping):
        raise CommandError(prefix.rstrip(".") or cls.__name__, "must be an object")
    hints, known = _shape(cls)
    for key in data:
        if key not in known:
            raise CommandError(f"{prefix}{key}", "unknown member")
    kwargs: dict[str, Any] = {}
    for name, fld in known.items():
        path = f"{prefix}{name}"
        if name not in data:
            if fld.default is dataclasses.MISSING and fld.default_factory is dataclasses.MISSING:
                raise CommandError(path, "missing member")
            continue
        kwargs[name] = _decode_value(hints[name], data[name], path, decode_secret)
    return cls(**kwargs)


def _decode_value(hint: Any, value: object, path: str, decode_secret: SecretDecoder) -> object:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = get_args(hint)
        if value is None:
            if type(None) in options:
                return None
            raise CommandError(path, "must not be null")
        non_none = [o for o in options if o is not type(None)]
        if all(o in _EVIDENCE.values() for o in non_none):
            return _decode_evidence(value, path, decode_secret)
        if len(non_none) == 1:
            return _decode_value(non_none[0], value, path, decode_secret)
        raise CommandError(path, "unsupported union")
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise CommandError(path, "must be an array")
        (item_hint, _ellipsis) = get_args(hint)
        return tuple(
            _decode_value(item_hint, item, f"{path}[{i}]", decode_secret)
            for i, item in enumerate(value)
        )
    if hint is Secret:
        return decode_secret(value, path)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise CommandError(path, f"must be one of {[m.value for m in hint]}") from None
    if hint is bool:
        if not isinstance(value, bool):
            raise CommandError(path, "must be a boolean")
        return value
    if hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise CommandError(path, "must be an integer")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise CommandError(path, "must be a string")
        return value
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        return _decode_dataclass(hint, value, f"{path}.", decode_secret)
    raise CommandError(path, "unsupported member type")


def _decode_evidence(value: object, path: str, decode_secret: SecretDecoder) -> object:
    if not isinstance(value, Mapping) or not isinstance(value.get("kind"), str):
        raise CommandError(path, "evidence must be an object with a kind")
    cls = _EVIDENCE.get(str(value["kind"]))
    if cls is None:
        raise CommandError(f"{path}.kind", f"must be one of {sorted(_EVIDENCE)}")
    rest = {k: v for k, v in value.items() if k != "kind"}
    return _decode_dataclass(cls, rest, f"{path}.", decode_secret)


def encode_command(
    command: Command, *, encode_secret: SecretEncoder = _digest_only
) -> tuple[str, dict[str, object]]:
    """The inverse of `decode_command` (with a matching secret codec). By default a `Secret`
    becomes `{"sha256": digest}` so an encoded command is safe to log or trace (S-1).
    `admit_run`'s `provider_policy` is returned under its own key for the caller to split off."""
    return command.name, typing.cast(dict[str, object], _encode(command, encode_secret))


def _encode(value: object, encode_secret: SecretEncoder) -> object:
    if isinstance(value, Secret):
        return encode_secret(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, tuple):
        return [_encode(v, encode_secret) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, object] = {}
        kind = getattr(type(value), "kind", None)
        if type(value) in _EVIDENCE.values() and kind is not None:
            out["kind"] = kind.value
        for fld in dataclasses.fields(value):
            out[fld.name] = _encode(getattr(value, fld.name), encode_secret)
        return out
    return value


__all__ = ["POLICY_MEMBERS", "decode_command", "decode_provider_policy", "encode_command"]
