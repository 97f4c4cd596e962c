"""Conformance traces: JSON Lines, one header and one line per step (SPEC §7,
docs/trace-format.md, conformance/run/trace.schema.json).

Tokens never appear raw: a `Secret` is written as `{"token": "<name>"}` and derived again from the
name when the trace is replayed (`trace_token`), so the projections' token digests match.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kernel
from conformance.run.faults import Fault, FaultKind
from conformance.run.pages import (
    ACTION_QUERIES,
    SOURCE_PARAMS,
    ExpiryPass,
    LostRetryPass,
    PageRequest,
    SourceQuery,
)
from conformance.run.projection import Projection
from kernel import (
    Command,
    CommandError,
    Outcome,
    Profile,
    Rejected,
    Secret,
    decode_command,
    decode_provider_policy,
    encode_command,
)
from kernel.approved_action import (
    ACTION_COMMANDS_BY_NAME,
    ActionCommand,
    decode_action_command,
    encode_action_command,
    is_action_command,
)
from kernel.workflow import (
    WORKFLOW_COMMANDS_BY_NAME,
    WorkflowCommand,
    decode_workflow_command,
    encode_workflow_command,
    is_workflow_command,
)

#: A command a trace step carries: a Run command (`kernel.codec`), a Workflow command
#: (`kernel.workflow.codec`, SPEC §4) or an approval-domain command
#: (`kernel.approved_action.trace_codec`, SPEC §5, issue 19); the replay sends each to its own
#: engine entry point.
AnyCommand = Command | WorkflowCommand | ActionCommand

TRACE_VERSION = 1
COMPONENTS = ("run", "journal", "workflow", "approved_action")
# Expectation kinds: the four outcome kinds, plus what a faulted step delivers instead.
EXPECT_KINDS = (
    "applied",
    "replayed",
    "rejected",
    "raced",
    "crashed",
    "error",
    "reopened",
    "page",
)


class TraceFormatError(ValueError):
    """A trace line that does not follow the format; names the line and the field."""

    def __init__(self, line: int, field: str, reason: str) -> None:
        super().__init__(f"line {line}: {field}: {reason}")
        self.line = line
        self.field = field


# Names of the tokens derived by `trace_token` in this process, by digest: the inverse that lets
# a recorder write `{"token": name}` for a Secret. Trace tokens are test capabilities derived
# from public names; nothing else is ever registered here.
_TRACE_TOKEN_NAMES: dict[str, str] = {}


def trace_token(name: str) -> Secret:
    """The capability a trace calls `name`: 64 hex characters (256 bits) derived from it."""
    digest = hashlib.sha256(b"ql3-trace-token-v1\0" + name.encode("utf-8")).hexdigest()
    secret = Secret.of(digest, "token")
    _TRACE_TOKEN_NAMES[secret.digest()] = name
    return secret


def projection_digest(projection: Projection) -> str:
    return hashlib.sha256(canonical(projection).encode("utf-8")).hexdigest()


def canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class TraceHeader:
    name: str
    component: str = "run"
    profile: str = "edge"
    seed: int = 0
    kernel_version: str = kernel.__version__
    trace_version: int = TRACE_VERSION
    description: str = ""
    capabilities: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Expectation:
    kind: str
    code: str | None
    projection: Projection
    digest: str
    page: dict[str, Any] | None = None  # page steps: the items or the tally (conformance.run.pages)


@dataclass(frozen=True, slots=True)
class TraceCommand:
    """A command as a trace carries it: name, arguments with token placeholders, and for
    `admit_run` the admission provider's policy (never part of the Run command, A-1)."""

    name: str
    args: dict[str, Any]
    provider_policy: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Step:
    step: int
    command: TraceCommand | None  # None for `reopen` and for page steps
    observed_at_ms: int
    expect: Expectation
    fault: Fault | None = None
    page: PageRequest | None = None  # a `query` or `pass` step


@dataclass(frozen=True, slots=True)
class Trace:
    header: TraceHeader
    steps: tuple[Step, ...]


class TokenNames:
    """Maps Secrets made with `trace_token(name)` back to their names for encoding."""

    def token(self, name: str) -> Secret:
        return trace_token(name)

    def name_of(self, secret: Secret) -> dict[str, str]:
        name = _TRACE_TOKEN_NAMES.get(secret.digest())
        if name is None:
            raise ValueError("only tokens made by trace_token(name) can be written to a trace")
        return {"token": name}


def encode_trace_command(command: AnyCommand, names: TokenNames) -> TraceCommand:
    if is_action_command(command):
        # `request_approval`'s admission policy travels beside the arguments, as for admit_run.
        name, args, action_policy = encode_action_command(command)
        return TraceCommand(name=name, args=args, provider_policy=action_policy)
    if is_workflow_command(command):
        name, args = encode_workflow_command(command, encode_secret=names.name_of)
        return TraceCommand(name=name, args=args)
    # A Run command: `is_workflow_command` narrows only its positive branch.
    name, args = encode_command(typing.cast(Command, command), encode_secret=names.name_of)
    policy = args.pop("provider_policy", None)
    return TraceCommand(
        name=name,
        args=args,
        provider_policy=policy if isinstance(policy, dict) else None,
    )


def _decode_token(value: object, field: str) -> Secret:
    if (
        not isinstance(value, Mapping)
        or set(value) != {"token"}
        or not isinstance(value["token"], str)
    ):
        raise CommandError(field, 'a trace token is {"token": "<name>"}')
    return trace_token(value["token"])


def decode_trace_command(command: TraceCommand) -> AnyCommand | Rejected:
    """The command of a trace step, strictly decoded by its domain's codec: a Workflow name
    (`admit_workflow`, `admit_task`, ...) by `kernel.workflow.codec`, any other by
    `kernel.codec` (which refuses an unknown name); an approval-domain name (`request_approval`,
    `approve_action`, ...) by `kernel.approved_action.trace_codec`."""
    if command.name in ACTION_COMMANDS_BY_NAME:
        action_policy = None
        if command.provider_policy is not None:
            action_policy = decode_provider_policy(command.provider_policy)
        return decode_action_command(command.name, command.args, provider_policy=action_policy)
    if command.name in WORKFLOW_COMMANDS_BY_NAME:
        if command.provider_policy is not None:
            raise CommandError("provider_policy", "only admit_run takes a provider policy")
        return decode_workflow_command(command.name, command.args, decode_secret=_decode_token)
    policy = None
    if command.provider_policy is not None:
        policy = decode_provider_policy(command.provider_policy)
    return decode_command(
        command.name, command.args, provider_policy=policy, decode_secret=_decode_token
    )


def expectation(outcome: Outcome | None, kind: str | None, projection: Projection) -> Expectation:
    """The expectation of a step: the outcome's kind and code, or a fault kind."""
    if kind is None:
        assert outcome is not None
        return Expectation(
            outcome.kind.value, outcome.code.value, projection, projection_digest(projection)
        )
    return Expectation(kind, None, projection, projection_digest(projection))


# -- JSON Lines ------------------------------------------------------------------------------
def dumps(trace: Trace) -> str:
    lines = [
        canonical(
            dataclasses.asdict(trace.header) | {"capabilities": list(trace.header.capabilities)}
        )
    ]
    for step in trace.steps:
        lines.append(canonical(_step_json(step)))
    return "\n".join(lines) + "\n"


def _step_json(step: Step) -> dict[str, Any]:
    out: dict[str, Any] = {
        "step": step.step,
        "observed_at_ms": step.observed_at_ms,
        "command": None
        if step.command is None
        else {
            "name": step.command.name,
            "args": step.command.args,
            **(
                {"provider_policy": step.command.provider_policy}
                if step.command.provider_policy is not None
                else {}
            ),
        },
        "expect": {
            "kind": step.expect.kind,
            "code": step.expect.code,
            "projection": step.expect.projection,
            "digest": step.expect.digest,
        },
    }
    if step.expect.page is not None:
        out["expect"]["page"] = step.expect.page
    if isinstance(step.page, SourceQuery):
        query: dict[str, Any] = {"source": step.page.source, "limit": step.page.limit}
        if "after" in SOURCE_PARAMS[step.page.source]:
            query["after"] = None if step.page.after is None else list(step.page.after)
        if step.page.process_started_at_ms is not None:
            query["process_started_at_ms"] = step.page.process_started_at_ms
        if step.page.local_executor_type is not None:
            query["local_executor_type"] = step.page.local_executor_type
        out["query"] = query
    elif isinstance(step.page, LostRetryPass):
        out["pass"] = {
            "name": "lost_retry_page",
            "limit": step.page.limit,
            "fail_closed": step.page.fail_closed,
            "attempt_suffix": step.page.attempt_suffix,
        }
    elif isinstance(step.page, ExpiryPass):
        out["pass"] = {
            "name": "lease_expiry_page",
            "limit": step.page.limit,
            "after": None if step.page.after is None else list(step.page.after),
            "profile": step.page.profile,
        }
    if step.fault is not None:
        fault: dict[str, Any] = {"kind": step.fault.kind.value}
        if step.fault.at_effect is not None:
            fault["at_effect"] = step.fault.at_effect
        if step.fault.skew_ms is not None:
            fault["skew_ms"] = step.fault.skew_ms
        if step.fault.at_candidate is not None:
            fault["at_candidate"] = step.fault.at_candidate
        out["fault"] = fault
    return out


def loads(text: str) -> Trace:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise TraceFormatError(1, "header", "empty trace")
    first = _json(lines[0], 1)
    if first.get("component") == "journal":
        raise TraceFormatError(
            1, "component", "a journal trace: conformance.journal.trace reads it"
        )
    header = _header(first, 1)
    steps = tuple(_step(_json(line, i), i) for i, line in enumerate(lines[1:], start=2))
    for index, step in enumerate(steps, start=1):
        if step.step != index:
            raise TraceFormatError(index + 1, "step", f"expected {index}, got {step.step}")
    return Trace(header, steps)


def _json(line: str, number: int) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceFormatError(number, "json", str(exc.msg)) from None
    if not isinstance(value, dict):
        raise TraceFormatError(number, "line", "must be an object")
    return value


def _take(obj: Mapping[str, Any], key: str, kind: type | tuple[type, ...], line: int) -> Any:
    if key not in obj:
        raise TraceFormatError(line, key, "missing")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TraceFormatError(line, key, "wrong type")
    return value


def _header(obj: dict[str, Any], line: int) -> TraceHeader:
    known = {f.name for f in dataclasses.fields(TraceHeader)}
    for key in obj:
        if key not in known:
            raise TraceFormatError(line, key, "unknown header member")
    version = _take(obj, "trace_version", int, line)
    if version != TRACE_VERSION:
        raise TraceFormatError(line, "trace_version", f"unsupported version {version}")
    component = _take(obj, "component", str, line)
    if component not in COMPONENTS:
        raise TraceFormatError(line, "component", f"must be one of {COMPONENTS}")
    capabilities = obj.get("capabilities", [])
    if not isinstance(capabilities, list) or not all(isinstance(c, str) for c in capabilities):
        raise TraceFormatError(line, "capabilities", "must be a list of strings")
    return TraceHeader(
        name=_take(obj, "name", str, line),
        component=component,
        profile=_take(obj, "profile", str, line),
        seed=_take(obj, "seed", int, line),
        kernel_version=_take(obj, "kernel_version", str, line),
        trace_version=version,
        description=str(obj.get("description", "")),
        capabilities=tuple(capabilities),
    )


def _step(obj: dict[str, Any], line: int) -> Step:
    for key in obj:
        if key not in {"step", "observed_at_ms", "command", "expect", "fault", "query", "pass"}:
            raise TraceFormatError(line, key, "unknown step member")
    raw_command = obj.get("command")
    command = None
    if raw_command is not None:
        if not isinstance(raw_command, dict):
            raise TraceFormatError(line, "command", "must be an object or null")
        policy = raw_command.get("provider_policy")
        if policy is not None and not isinstance(policy, dict):
            raise TraceFormatError(line, "command.provider_policy", "must be an object")
        command = TraceCommand(
            name=_take(raw_command, "name", str, line),
            args=_take(raw_command, "args", dict, line),
            provider_policy=policy,
        )
        # A command the kernel's codec cannot decode is the trace's fault, not the runner's:
        # refused here, with its line, before any adapter sees it (a strict-decoding refusal
        # such as A-1's is a `Rejected` value and stays a step the trace expects).
        try:
            decode_trace_command(command)
        except CommandError as exc:
            raise TraceFormatError(line, _command_field(exc.field), exc.reason) from None
    expect_obj = _take(obj, "expect", dict, line)
    kind = _take(expect_obj, "kind", str, line)
    if kind not in EXPECT_KINDS:
        raise TraceFormatError(line, "expect.kind", f"must be one of {EXPECT_KINDS}")
    code = expect_obj.get("code")
    if code is not None and not isinstance(code, str):
        raise TraceFormatError(line, "expect.code", "must be a string or null")
    for key in expect_obj:
        if key not in {"kind", "code", "projection", "digest", "page"}:
            raise TraceFormatError(line, f"expect.{key}", "unknown expectation member")
    expected_page = expect_obj.get("page")
    if expected_page is not None and not isinstance(expected_page, dict):
        raise TraceFormatError(line, "expect.page", "must be an object")
    projection = _take(expect_obj, "projection", dict, line)
    digest = _take(expect_obj, "digest", str, line)
    if digest != projection_digest(projection):
        raise TraceFormatError(line, "expect.digest", "does not match the projection")
    fault = None
    if "fault" in obj and obj["fault"] is not None:
        fault_obj = _take(obj, "fault", dict, line)
        try:
            fault_kind = FaultKind(_take(fault_obj, "kind", str, line))
        except ValueError:
            raise TraceFormatError(line, "fault.kind", "unknown fault") from None
        fault = Fault(
            fault_kind,
            fault_obj.get("at_effect"),
            fault_obj.get("skew_ms"),
            fault_obj.get("at_candidate"),
        )
    page = _page_request(obj, line)
    if page is not None:
        if command is not None:
            raise TraceFormatError(line, "command", "a page step has no command")
        if expected_page is None:
            raise TraceFormatError(line, "expect.page", "a page step expects a page")
        if fault is not None and not (
            isinstance(page, (LostRetryPass, ExpiryPass))
            and fault.kind is FaultKind.IO_ERROR
            and fault.at_candidate is not None
        ):
            raise TraceFormatError(line, "fault", "a page step takes only io_error at_candidate")
    elif command is None and (fault is None or fault.kind is not FaultKind.REOPEN):
        raise TraceFormatError(line, "command", "only a reopen or page step has no command")
    return Step(
        step=_take(obj, "step", int, line),
        command=command,
        observed_at_ms=_take(obj, "observed_at_ms", int, line),
        expect=Expectation(kind, code, projection, digest, expected_page),
        fault=fault,
        page=page,
    )


def _command_field(field: str) -> str:
    """Where in the step a codec error lies: the name, the provider policy or an argument."""
    if field == "command":
        return "command.name"
    if field.startswith("provider_policy"):
        return f"command.{field}"
    return f"command.args.{field}"


def _limit(obj: Mapping[str, Any], field: str, line: int) -> int:
    limit = _take(obj, "limit", int, line)
    if not 1 <= limit <= 64:
        raise TraceFormatError(line, f"{field}.limit", "must be 1..64 (P-1)")
    return int(limit)


def _page_request(obj: Mapping[str, Any], line: int) -> PageRequest | None:
    if "query" in obj and "pass" in obj:
        raise TraceFormatError(line, "query", "a step is a query or a pass, not both")
    if "query" in obj:
        query = _take(obj, "query", dict, line)
        source = _take(query, "source", str, line)
        params = SOURCE_PARAMS.get(source)
        if params is None:
            raise TraceFormatError(line, "query.source", f"must be one of {list(SOURCE_PARAMS)}")
        allowed = {"source", "limit", *params} - {"observed_at_ms"}
        for key in query:
            if key not in allowed:
                raise TraceFormatError(line, f"query.{key}", f"not a parameter of {source}")
        after = query.get("after")
        if after is not None and not isinstance(after, list):
            raise TraceFormatError(line, "query.after", "must be a key (a list) or null")
        if source in ACTION_QUERIES and after is not None and not _action_key(after):
            raise TraceFormatError(line, "query.after", "must be [at_ms, action_id] or null")
        started = query.get("process_started_at_ms")
        executor = query.get("local_executor_type")
        if "process_started_at_ms" in params and not isinstance(started, int):
            raise TraceFormatError(line, "query.process_started_at_ms", "missing")
        if "local_executor_type" in params and not isinstance(executor, str):
            raise TraceFormatError(line, "query.local_executor_type", "missing")
        return SourceQuery(
            source=source,
            limit=_limit(query, "query", line),
            after=None if after is None else tuple(after),
            process_started_at_ms=started,
            local_executor_type=executor,
        )
    if "pass" in obj:
        page = _take(obj, "pass", dict, line)
        name = _take(page, "name", str, line)
        if name == "lease_expiry_page":
            return _expiry_pass(page, line)
        for key in page:
            if key not in {"name", "limit", "fail_closed", "attempt_suffix"}:
                raise TraceFormatError(line, f"pass.{key}", "unknown pass member")
        if name != "lost_retry_page":
            raise TraceFormatError(
                line, "pass.name", "must be lost_retry_page or lease_expiry_page"
            )
        return LostRetryPass(
            limit=_limit(page, "pass", line),
            fail_closed=_take(page, "fail_closed", bool, line),
            attempt_suffix=_take(page, "attempt_suffix", str, line),
        )
    return None


def _action_key(after: list[Any]) -> bool:
    """Whether `after` is a due-index key of the approval domain, `[at_ms, action_id]`."""
    return (
        len(after) == 2
        and type(after[0]) is int
        and after[0] >= 0
        and isinstance(after[1], str)
        and bool(after[1])
    )


def _expiry_pass(page: Mapping[str, Any], line: int) -> ExpiryPass:
    """`{"name": "lease_expiry_page", "limit", "after", "profile"}` (INBOX-42)."""
    for key in page:
        if key not in {"name", "limit", "after", "profile"}:
            raise TraceFormatError(line, f"pass.{key}", "not a member of lease_expiry_page")
    after = page.get("after")
    if after is not None and not (
        isinstance(after, list)
        and len(after) == 2
        and isinstance(after[0], int)
        and isinstance(after[1], str)
    ):
        raise TraceFormatError(line, "pass.after", "must be [expires_at_ms, attempt_id] or null")
    profile = _take(page, "profile", str, line)
    if profile not in {p.value for p in Profile}:
        raise TraceFormatError(line, "pass.profile", f"must be one of {[p.value for p in Profile]}")
    return ExpiryPass(
        limit=_limit(page, "pass", line),
        after=None if after is None else (after[0], after[1]),
        profile=profile,
    )
