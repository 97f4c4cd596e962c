"""The boundary-generated corpus of the guarded writes (issue 16, item 1, second half): one small
named trace per decision boundary of every write command of the Run domain.

The boundaries are *derived*, not listed: `enumerate_write_boundaries` reads the transition
function of each command in `kernel.transitions.TRANSITIONS` (its source text, through `ast`),
following the helpers it delegates to (the fence checks of B-16, the eligibility predicates, the
clock check of V-5, the due-time decision of §1.8.1), and turns

- every branch `if <test>: return Rejected | Raced | Replayed(Code.X)` into one boundary per
  operand of `<test>` (an `and` / `or` chain, `not` stripped, predicate calls expanded): a trace
  in which that operand alone holds, so the command is answered with code X, followed by the same
  command once the operand just fails, so it applies (or meets the next check in order);
- an operand `x is not E.V` over a small enumeration (at most three members: the Worker session
  status, the lease status) into one boundary per other member (a `draining` and an `offline`
  Worker are two exclusions);
- every comparison with the observation time (`now`, `observed_at_ms`; `clock_regressed` of V-5
  is one) into the three instants equal / one ms before / one ms after.

A boundary is named `<code>` (or `<code>-<operand>` when its branch has several operands, with
`-<member>` or `-time-<instant>` where it applies) and its trace `<SPEC>-write-<command>-<name>`.
Each boundary has a builder in `_BUILDERS` that reaches the state with real kernel commands
(`model_tests.corpus.dsl`), checking every outcome while recording; the expected codes are the
kernel's and regeneration fails if they change. A boundary no command sequence can reach, or
one an earlier check in the order always answers first, is reported as such with the reason,
never faked. `coverage()` reports, per command, what covers each boundary; a boundary without a
builder is `uncovered` and tests/conformance/test_boundary_corpus.py fails.

    .venv/bin/python -m model_tests.corpus.boundaries     # both reports: sources and writes
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from conformance.run.trace import Trace, trace_token
from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    ActivateLocal,
    Command,
    CompletedEvidence,
    CompleteLocal,
    CompletionOutcome,
    ConvergeCancel,
    CreateRun,
    ExpireWithLease,
    FailOrphanedCreated,
    FailStart,
    Fence,
    GrantLease,
    LocalReceipt,
    LostRetryStep,
    NotRunningEvidence,
    PolicyDefinition,
    RecordLocalHandle,
    RecordLocalStop,
    RecoverLocalStartup,
    RecoverRuntime,
    RenewLease,
    RequestCancel,
    Safety,
    StopResult,
    WorkerSession,
    WorkerSessionStatus,
    token_digest,
)
from kernel.specs import states
from kernel.specs.states import Actor, CancelReason, Profile, RunKind, RunOwner
from kernel.transitions import (
    TRANSITIONS,
    clock,
    retry_policy,
    run_admission,
    run_cancellation,
    run_lease,
    run_local,
    run_lost_retry,
    run_recovery,
)
from model_tests.corpus.dsl import LEASE_MS, Scenario, worker

NO_BACKOFF = PolicyDefinition(3, True, Safety.IDEMPOTENT, 0, 0)
BACKOFF = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 60_000)
LOCAL = "local"
CALLBACK = token_digest("write-boundary-callback".ljust(40, "c"))
OUTCOMES = ("Rejected", "Raced", "Replayed")
TIME_NAMES = frozenset({"now", "observed_at_ms"})
INSTANTS = ("equal", "one-ms-before", "one-ms-after")

#: Helpers a transition delegates a decision to: their branches and conditions are read as the
#: command's own (the fence checks, the eligibility predicates, the clock and due-time checks).
_MODULES = (
    run_lease,
    run_local,
    run_admission,
    run_cancellation,
    run_lost_retry,
    run_recovery,
    clock,
    retry_policy,
)
HELPERS: dict[str, Callable[..., Any]] = {
    name: getattr(module, name)
    for module in _MODULES
    for name in (
        "fence_identity",
        "fence_live",
        "worker_is_current",
        "_released_replay",
        "_local_attempt",
        "_duration_ok",
        "resolve_started",
        "clock_regressed",
        "decide",
        "receipt_authenticated",
        "admission_policy_code",
        "policy_limits_code",
        "is_lost_retry_eligible",
        "is_local_startup_candidate",
        "is_orphaned_created",
        "is_runtime_recovery_candidate",
        "is_pristine",
        "has_no_live_execution",
    )
    if hasattr(module, name)
}
#: Predicates kept whole: one operand each (their inside is one fact about the Run, E-1).
OPAQUE = frozenset({"has_revoked_remote_authority", "_same_identity"})


@dataclass(frozen=True, slots=True)
class WriteBoundary:
    """One decision boundary of a write: `code` is the kernel's answer when it holds, `kind`
    is term, member or time, `origin` the branch test it was derived from."""

    command: str
    name: str
    code: str
    kind: str
    origin: str


@dataclass(frozen=True, slots=True)
class _Branch:
    code: str
    test: ast.expr
    context: tuple[ast.expr, ...]
    function: str
    assigned: dict[str, str] = field(hash=False, compare=False)


def _function_ast(function: Callable[..., Any]) -> ast.FunctionDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def _call_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        return node.func.id
    return None


def _slug(text: str) -> str:
    return text.strip("_").replace("_", "-").lower()


def _returned_codes(function: Callable[..., Any], seen: set[str]) -> Iterator[str]:
    """The `Code.X` values a helper such as `admission_policy_code` can return."""
    for node in ast.walk(_function_ast(function)):
        if isinstance(node, ast.Return) and node.value is not None:
            value = node.value
            if isinstance(value, ast.Attribute) and ast.unparse(value.value) == "Code":
                yield value.attr
        name = _call_name(node)
        if name in HELPERS and name not in seen:
            seen.add(name)
            yield from _returned_codes(HELPERS[name], seen)


def _branches(function: Callable[..., Any], seen: set[str]) -> Iterator[_Branch]:
    """Every refusal / replay branch of `function` in source order, following delegations
    (`checked = fence_identity(...)`, `return resolve_started(...)`)."""
    root = _function_ast(function)
    assigned: dict[str, str] = {}
    for node in ast.walk(root):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            name = _call_name(node.value)
            if name is not None:
                assigned[node.targets[0].id] = name

    def follow(name: str | None) -> Iterator[_Branch]:
        if name in HELPERS and name not in seen:
            seen.add(name)
            yield from _branches(HELPERS[name], seen)

    def visit(body: list[ast.stmt], tests: list[ast.expr]) -> Iterator[_Branch]:
        for stmt in body:
            if isinstance(stmt, ast.If):
                yield from visit(stmt.body, [*tests, stmt.test])
                yield from visit(stmt.orelse, tests)
            elif isinstance(stmt, ast.Assign):
                yield from follow(_call_name(stmt.value))
            elif isinstance(stmt, ast.Return) and stmt.value is not None:
                value = stmt.value
                outcome = _call_name(value)
                if outcome in OUTCOMES and tests:
                    assert isinstance(value, ast.Call)
                    # the innermost test decides; the enclosing ones are its context
                    test, context = tests[-1], tuple(tests[:-1])
                    arg = value.args[0]
                    fn = function.__name__
                    if isinstance(arg, ast.Attribute):
                        yield _Branch(arg.attr, test, context, fn, assigned)
                    elif isinstance(arg, ast.Name) and assigned.get(arg.id) in HELPERS:
                        for code in _returned_codes(HELPERS[assigned[arg.id]], set()):
                            yield _Branch(code, test, context, fn, assigned)
                    else:  # a code read from the input (unknown evidence: its reason)
                        code = ast.unparse(arg).split(".")[-2].upper()
                        yield _Branch(code, test, context, fn, assigned)
                else:
                    yield from follow(outcome)

    yield from visit(root.body, [])


def _atoms(
    node: ast.expr, seen: set[str], assigned: dict[str, str], trigger: bool = True
) -> Iterator[tuple[ast.expr, bool]]:
    """The operands of a branch test with their polarity (`True`: the branch is taken when the
    operand holds; `False`: when it fails), `not` flipping it, predicate calls expanded (the
    `if` guards and boolean returns of the predicate are its operands) and a name bound to a
    helper's result (`disposition = decide(...)`) read through the helper's time comparisons."""
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            yield from _atoms(value, seen, assigned, trigger)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield from _atoms(node.operand, seen, assigned, not trigger)
    elif _call_name(node) == "isinstance":
        return  # a delegation's pass-through (`isinstance(checked, Rejected)`), no condition
    elif (name := _call_name(node)) in HELPERS and name != "clock_regressed":
        if name in seen:
            return
        seen.add(name)
        for inner in ast.walk(_function_ast(HELPERS[name])):
            if isinstance(inner, ast.If):  # `if <test>: return True` (has_no_live_execution)
                yield from _atoms(inner.test, seen, assigned, trigger)
            elif isinstance(inner, ast.Return) and isinstance(
                inner.value, (ast.BoolOp, ast.Compare, ast.Call, ast.UnaryOp)
            ):
                yield from _atoms(inner.value, seen, assigned, trigger)
    elif (
        isinstance(node, ast.Compare)
        and isinstance(node.left, ast.Name)
        and assigned.get(node.left.id) in HELPERS
    ):
        helper = _function_ast(HELPERS[assigned[node.left.id]])
        timed = [n for n in ast.walk(helper) if isinstance(n, ast.Compare) and _is_time(n)]
        for compare in timed:
            yield compare, not trigger  # `decide` returns None when its due check fails
        if not timed:
            yield node, trigger
    else:
        yield node, trigger


def _is_time(atom: ast.expr) -> bool:
    if _call_name(atom) == "clock_regressed":
        return True
    if not isinstance(atom, ast.Compare):
        return False
    # a comparison of the observation time (or the process start, B-30) with a durable time
    sides = [atom.left, *atom.comparators]
    if any(isinstance(side, ast.Constant) for side in sides):
        return False
    texts = [ast.unparse(side) for side in sides]
    return any(t in TIME_NAMES or t.endswith("process_started_at_ms") for t in texts)


def _operand(atom: ast.expr) -> str:
    """A short name for an operand: the attribute (or name) it tests, e.g. `worker-status`."""
    if _call_name(atom) == "clock_regressed":
        return "clock"
    target: ast.expr = atom
    if isinstance(atom, ast.Compare):
        target = atom.left
        if isinstance(target, ast.Name) and target.id in TIME_NAMES:
            target = atom.comparators[0]
    if isinstance(target, ast.Call):
        target = target.func
    parts = ast.unparse(target).replace("aggregate.", "").replace("command.", "").split(".")
    return _slug("-".join(parts[-2:]))


def _small_enum_members(atom: ast.expr, trigger: bool) -> tuple[str, ...]:
    """For `x is E.V` / `x is not E.V` over an enumeration of at most three members (the Worker
    session status, the lease status), the members for which the branch is taken."""
    if not (isinstance(atom, ast.Compare) and isinstance(atom.ops[0], (ast.Is, ast.IsNot))):
        return ()
    right = atom.comparators[0]
    if not isinstance(right, ast.Attribute) or not isinstance(right.value, ast.Name):
        return ()
    found = getattr(states, right.value.id, None)
    if not (isinstance(found, type) and issubclass(found, enum.Enum)) or len(found) > 3:
        return ()
    # the branch is taken for the member itself when `is` holds (or `is not` fails) ...
    if isinstance(atom.ops[0], ast.Is) == trigger:
        return (found[right.attr].value,)
    # ... and for every other member when `is not` holds (or `is` fails)
    return tuple(m.value for m in found if m.name != right.attr)


def enumerate_write_boundaries(command: str) -> tuple[WriteBoundary, ...]:
    """Every boundary of the write `command`, derived from its transition (module docstring)."""
    function = WRITES[command]
    found: dict[str, WriteBoundary] = {}

    def add(name: str, code: str, kind: str, origin: str) -> None:
        found.setdefault(name, WriteBoundary(command, name, code, kind, origin))

    for branch in _branches(function, set()):
        code = _slug(branch.code)
        atoms = list(_atoms(branch.test, set(), branch.assigned))
        origin = f"{branch.function}: {ast.unparse(branch.test)}"
        for atom, trigger in atoms:
            base = code if len(atoms) == 1 else f"{code}-{_operand(atom)}"
            if _is_time(atom):
                for instant in INSTANTS:
                    add(f"{base}-time-{instant}", branch.code, "time", origin)
            elif members := _small_enum_members(atom, trigger):
                for member in members:
                    add(
                        f"{base}-{member}" if len(atoms) > 1 else f"{code}-{member}",
                        branch.code,
                        "member",
                        origin,
                    )
            else:
                add(base, branch.code, "term", origin)
    return tuple(found.values())


#: Every write command of the Run domain by name, and its transition function (the kernel's
#: dispatch table: a command added there appears here, uncovered until it has builders).
WRITES: dict[str, Callable[..., Any]] = {
    command.name: function  # type: ignore[attr-defined]
    for command, function in TRANSITIONS.items()
}


# -- builders ---------------------------------------------------------------------------------
Body = Callable[[Scenario], None]


@dataclass(frozen=True, slots=True)
class WriteBuilder:
    """The trace of one write boundary: `body` records it; `spec` is the property it evidences.
    `trace` names a trace several boundaries of one command share (one step on each, every one
    checked while recording); without it the trace is named after the boundary."""

    spec: str
    description: str
    body: Body
    trace: str | None = None


@dataclass(frozen=True, slots=True)
class NoTrace:
    """A boundary without a trace of its own, and why: `unreachable` (no command sequence
    reaches it), `shadowed` (an earlier check in the order always answers first) or `pending`
    (reachable, no builder yet: reported as uncovered)."""

    status: str
    reason: str


_BUILDERS: dict[tuple[str, str], WriteBuilder | NoTrace] = {}
_SHIFT = {"equal": 0, "one-ms-before": -1, "one-ms-after": 1}


def _register(command: str, name: str, spec: str, description: str, body: Body) -> None:
    assert (command, name) not in _BUILDERS, (command, name)
    _BUILDERS[(command, name)] = WriteBuilder(spec, description, body)


def _register_shared(
    command: str, names: tuple[str, ...], trace: str, spec: str, description: str, *, body: Body
) -> None:
    """One trace `<spec>-write-<command>-<trace>` whose steps sit on each of `names` (each step
    answered with its boundary's code, checked while recording): a shared world costs one
    replay per runner instead of one per boundary."""
    for name in names:
        assert (command, name) not in _BUILDERS, (command, name)
        _BUILDERS[(command, name)] = WriteBuilder(spec, description, body, trace)


def no_trace(command: str, names: tuple[str, ...], status: str, reason: str) -> None:
    for name in names:
        _BUILDERS[(command, name)] = NoTrace(status, reason)


def _taken(instant: str, op: type[ast.cmpop], durable_left: bool) -> bool:
    """Whether a comparison `durable <op> now` (or `now <op> durable`) holds when `now` is the
    durable time shifted by `instant`: the expectation a time trace checks while recording."""
    d = _SHIFT[instant]
    left, right = (0, d) if durable_left else (d, 0)
    return {
        ast.Lt: left < right,
        ast.LtE: left <= right,
        ast.Gt: left > right,
        ast.GtE: left >= right,
    }[op]


W = worker()
W_LOCAL = worker("w-local", session="s-local", executor_types=(LOCAL,))


def admitted(s: Scenario, rid: str = "r1", **kw: Any) -> str:
    return s.admit(rid, NO_BACKOFF, **kw)


def granted(s: Scenario, rid: str = "r1", *, regrant: bool = False) -> str:
    """A Run whose claimed Attempt holds a lease until now + LEASE_MS; with `regrant`, its first
    lease expired (T7) and it holds generation 2, the fence of generation 1 kept."""
    aid = admitted(s, rid)
    s.grant(rid, aid, W)
    if regrant:
        s.tick(LEASE_MS)
        s.expire(rid, aid, expect="applied:released")
        s.grant(rid, aid, W)
    return aid


# -- grant_lease (T1, B-16) -----------------------------------------------------------------
def _grant(s: Scenario, rid: str, aid: str, by: WorkerSession = W, **kw: Any) -> GrantLease:
    duration = kw.pop("duration_ms", LEASE_MS)
    return GrantLease(rid, aid, by, s.grant_token(), duration)


def _grant_case(
    name: str, spec: str, description: str, code: str
) -> Callable[[Callable[[Scenario], GrantLease]], Body]:
    """A grant boundary: `body` builds the world and returns the refused command; the trace then
    shows the refusal with `code` and a grant of `r1` to the online Worker that applies."""

    def register(body: Callable[[Scenario], GrantLease]) -> Body:
        def record(s: Scenario) -> None:
            command = body(s)
            s.do(command, f"{_kind(code)}:{code}")
            s.grant("r1", "r1-a1", W)

        _register("grant_lease", name, spec, description, record)
        return record

    return register


def _kind(code: str) -> str:
    return "raced" if code == "NOT_ELIGIBLE" else "rejected"


@_grant_case(
    "run-not-found-aggregate",
    "RUN-05",
    "grant_lease: a grant for a Run id with no Run is refused "
    "RUN_NOT_FOUND; the grant of the admitted Run applies.",
    "RUN_NOT_FOUND",
)
def _g_no_run(s: Scenario) -> GrantLease:
    admitted(s)
    return _grant(s, "ghost", "ghost-a1")


@_grant_case(
    "attempt-not-found",
    "RUN-05",
    "grant_lease: a grant naming an Attempt the Run does not "
    "have is refused ATTEMPT_NOT_FOUND; its own Attempt's grant applies.",
    "ATTEMPT_NOT_FOUND",
)
def _g_no_attempt(s: Scenario) -> GrantLease:
    admitted(s)
    return _grant(s, "r1", "r1-zz")


@_grant_case(
    "not-runtime-owned-legacy",
    "RUN-05",
    "grant_lease: a legacy-owned queued Run is refused "
    "NOT_RUNTIME_OWNED; the runtime-owned Run beside it is granted.",
    "NOT_RUNTIME_OWNED",
)
def _g_legacy(s: Scenario) -> GrantLease:
    admitted(s)
    aid = admitted(s, "legacy", owner=RunOwner.LEGACY)
    return _grant(s, "legacy", aid)


@_grant_case(
    "cancel-requested",
    "RETRY-11",
    "grant_lease: a queued Run with a cancellation intent is "
    "refused CANCEL_REQUESTED; the Run without one is granted.",
    "CANCEL_REQUESTED",
)
def _g_intent(s: Scenario) -> GrantLease:
    admitted(s)
    aid = admitted(s, "intent")
    s.do(RequestCancel("intent", CancelReason.USER, Actor.USER), "applied")
    return _grant(s, "intent", aid)


def _g_worker_of(status: WorkerSessionStatus) -> Callable[[Scenario], GrantLease]:
    def body(s: Scenario) -> GrantLease:
        admitted(s)
        return _grant(s, "r1", "r1-a1", worker(status=status))

    return body


for _status in (WorkerSessionStatus.DRAINING, WorkerSessionStatus.OFFLINE):
    _grant_case(
        f"worker-unavailable-worker-status-{_status.value}",
        "LEASE-04",
        f"grant_lease (T1): a {_status.value} Worker session is refused WORKER_UNAVAILABLE (a "
        "new lease needs an online session); the same Worker online is granted.",
        "WORKER_UNAVAILABLE",
    )(_g_worker_of(_status))


@_grant_case(
    "executor-type-mismatch",
    "LEASE-04",
    "grant_lease (T1): a Worker that does not offer the "
    "Attempt's executor type is refused EXECUTOR_TYPE_MISMATCH; one that does is granted.",
    "EXECUTOR_TYPE_MISMATCH",
)
def _g_executor(s: Scenario) -> GrantLease:
    admitted(s)
    return _grant(s, "r1", "r1-a1", W_LOCAL)


@_grant_case(
    "lease-duration-invalid",
    "RUN-05",
    "grant_lease: a lease of 4 999 ms (one below the "
    "minimum) is refused LEASE_DURATION_INVALID; the default duration is granted.",
    "LEASE_DURATION_INVALID",
)
def _g_duration(s: Scenario) -> GrantLease:
    admitted(s)
    return _grant(s, "r1", "r1-a1", duration_ms=4_999)


def _g_not_latest(s: Scenario) -> None:
    aid = admitted(s)
    s.grant("r1", aid, W)
    s.starting("r1", aid, W)
    s.running("r1", aid, W)
    s.tick(LEASE_MS)
    s.expire("r1", aid, expect="applied:lost")
    s.do(LostRetryStep("r1", "r1-a2"), "applied:scheduled")
    s.do(LostRetryStep("r1", "r1-a2"), "applied:requeued")
    s.do(_grant(s, "r1", aid), "rejected:ATTEMPT_NOT_LATEST")
    s.grant("r1", "r1-a2", W)


_register(
    "grant_lease",
    "attempt-not-latest",
    "RUN-05",
    "grant_lease: after a lost retry requeued "
    "the Run with Attempt 2, a grant of Attempt 1 is refused ATTEMPT_NOT_LATEST; Attempt 2's "
    "grant applies.",
    _g_not_latest,
)


def _g_not_queued(s: Scenario) -> None:
    aid = granted(s)
    s.do(_grant(s, "r1", aid), "raced:NOT_ELIGIBLE")
    s.tick(LEASE_MS)
    s.expire("r1", aid, expect="applied:released")
    s.grant("r1", aid, W)


_register(
    "grant_lease",
    "not-eligible-run-status",
    "RUN-05",
    "grant_lease: a second grant of a "
    "dispatching Run (its claimed Attempt already leased) is raced NOT_ELIGIBLE; once the lease "
    "expired (T7, queued again) the grant applies with generation 2.",
    _g_not_queued,
)
no_trace(
    "grant_lease",
    ("not-eligible-attempt-status",),
    "unreachable",
    "a queued Run's latest Attempt is always claimed (I-2); an older Attempt is refused "
    "ATTEMPT_NOT_LATEST first",
)
no_trace(
    "grant_lease",
    ("run-not-found-run-run-id",),
    "unreachable",
    "a store loads the aggregate by the command's run id, so the loaded Run id always matches",
)

for _instant in INSTANTS:

    def _g_session(s: Scenario, instant: str = _instant) -> None:
        admitted(s)
        s.tick(1)
        expiry = s.now
        at = expiry + _SHIFT[instant]
        by = worker(expires_at_ms=expiry)
        taken = _taken(instant, ast.LtE, durable_left=True)
        expect = "rejected:WORKER_UNAVAILABLE" if taken else "applied:granted"
        s.do(_grant(s, "r1", "r1-a1", by), expect, at=at)

    _register(
        "grant_lease",
        f"worker-unavailable-worker-session-expires-at-ms-time-{_instant}",
        "LEASE-04",
        f"grant_lease (T1): a grant observed {_instant.replace('-', ' ')} the Worker "
        "session's expiry (`session_expires_at_ms <= now` refuses WORKER_UNAVAILABLE).",
        _g_session,
    )

    def _g_clock(s: Scenario, instant: str = _instant) -> None:
        admitted(s)
        at = s.agg("r1").run.updated_at_ms + _SHIFT[instant]
        taken = _taken(instant, ast.Lt, durable_left=False)
        expect = "rejected:CLOCK_REGRESSION" if taken else "applied:granted"
        s.do(_grant(s, "r1", "r1-a1"), expect, at=at)

    _register(
        "grant_lease",
        f"clock-regression-time-{_instant}",
        "RUN-04",
        f"grant_lease (V-5): a grant observed {_instant.replace('-', ' ')} the Run's last "
        "change (earlier than a durable time refuses CLOCK_REGRESSION).",
        _g_clock,
    )


# -- the fenced writes (B-16 checks 1-12: T2, T3, T4, T5, T6) ----------------------------------
Make = Callable[[Scenario, str, str, Fence, WorkerSession], Command]


def _started(s: Scenario, rid: str = "r1", *, regrant: bool = False) -> str:
    aid = granted(s, rid, regrant=regrant)
    s.starting(rid, aid, W)
    return aid


def _running(s: Scenario, rid: str = "r1", *, regrant: bool = False) -> str:
    aid = _started(s, rid, regrant=regrant)
    s.running(rid, aid, W)
    return aid


def _created_at(s: Scenario, rid: str, aid: str) -> int:
    """The handle's start time: the Attempt's creation (V-5 / E-4 keep it from moving time)."""
    attempt = s.agg(rid).attempt(aid) or s.agg(rid).latest_attempt
    assert attempt is not None
    return attempt.created_at_ms


#: Each fenced write: the world in which it applies (returns the Attempt), and the command.
FENCED: dict[str, tuple[Callable[..., str], Make, str]] = {
    "acknowledge_starting": (
        granted,
        lambda s, rid, aid, f, by: AcknowledgeStarting(rid, aid, f, by),
        "a leased claimed Attempt",
    ),
    "renew_lease": (
        _started,
        lambda s, rid, aid, f, by: RenewLease(rid, aid, f, by, LEASE_MS),
        "a starting Attempt",
    ),
    "acknowledge_running": (
        _started,
        lambda s, rid, aid, f, by: AcknowledgeRunning(
            rid, aid, f, by, f"pid:{aid}", _created_at(s, rid, aid)
        ),
        "a starting Attempt",
    ),
    "fail_start": (
        _started,
        lambda s, rid, aid, f, by: FailStart(rid, aid, f, by),
        "a starting Attempt",
    ),
    "complete_with_lease": (
        _running,
        lambda s, rid, aid, f, by: s.completion(rid, aid, by, f),
        "a running Attempt",
    ),
}

#: Fence fields made stale alone (B-16 checks 3-7), by boundary, and the code each gives.
STALE_FENCE: dict[str, dict[str, Any]] = {
    "lease-worker-mismatch": {"worker_id": "w-other"},
    "lease-worker-session-mismatch": {"worker_session_id": "s-other"},
    "lease-worker-generation-mismatch": {"worker_generation": 2},
    "lease-token-mismatch": {"lease_token": trace_token("stale-fence-token")},
    "lease-missing-lease": {"lease_generation": 2},
}
#: The Worker named by the command made not current alone (B-16 check 11).
STALE_WORKER: dict[str, dict[str, Any]] = {
    "worker-unavailable-worker-worker-id": {"worker_id": "w-other"},
    "worker-unavailable-worker-session-id": {"session_id": "s-other"},
    "worker-unavailable-worker-generation": {"generation": 2},
    "worker-unavailable-worker-status-offline": {"status": WorkerSessionStatus.OFFLINE},
}


Variant = Callable[[Scenario, str, Fence], tuple[str, Fence, WorkerSession]]


def _stale_fence(change: dict[str, Any]) -> Variant:
    return lambda s, aid, f: (aid, dataclasses.replace(f, **change), W)


def _stale_worker(change: dict[str, Any]) -> Variant:
    return lambda s, aid, f: (aid, f, dataclasses.replace(W, **change))


def _fenced_cases(command: str) -> None:
    setup, make, world = FENCED[command]

    def refused_then_applied(
        name: str, code: str, spec: str, description: str, variant: Variant
    ) -> None:
        def body(s: Scenario) -> None:
            aid = setup(s)
            fence = s.fence("r1", aid, W)
            vaid, vfence, vby = variant(s, aid, fence)
            s.do(make(s, "r1", vaid, vfence, vby), f"rejected:{code}")
            s.do(make(s, "r1", aid, fence, W), "applied")

        _register(
            command,
            name,
            spec,
            f"{command} on {world}: {description}; the command "
            "with the live fence and Worker then applies.",
            body,
        )

    for name, change in STALE_FENCE.items():
        code = name.replace("-", "_").upper()
        if name == "lease-missing-lease":
            code = "LEASE_MISSING"
        refused_then_applied(
            name,
            code,
            "LEASE-02",
            f"a fence whose {', '.join(change)} alone is stale is refused {code}",
            _stale_fence(change),
        )
    refused_then_applied(
        "lease-missing-attempt",
        "LEASE_MISSING",
        "LEASE-02",
        "a fence for an Attempt the Run does not have is refused LEASE_MISSING",
        lambda s, aid, f: ("r1-zz", f, W),
    )
    refused_then_applied(
        "lease-version-mismatch",
        "LEASE_VERSION_MISMATCH",
        "LEASE-02",
        "a fence expecting a lease version one above the live one is refused "
        "LEASE_VERSION_MISMATCH",
        lambda s, aid, f: (aid, dataclasses.replace(f, expected_version=f.expected_version + 1), W),
    )
    for name, change in STALE_WORKER.items():
        refused_then_applied(
            name,
            "WORKER_UNAVAILABLE",
            "LEASE-04",
            f"the lease holder's session with "
            f"{', '.join(change)} alone changed is refused WORKER_UNAVAILABLE",
            _stale_worker(change),
        )

    def generation_body(s: Scenario) -> None:
        aid = setup(s, regrant=True)
        old = s.fence("r1", aid, W)
        lease = s.agg("r1").leased_lease(aid)
        assert lease is not None
        assert lease.lease_generation == 2
        stale = dataclasses.replace(
            old, lease_generation=1, lease_token=s.tokens[(aid, 1)], expected_version=2
        )
        s.do(make(s, "r1", aid, stale, W), "rejected:LEASE_GENERATION_MISMATCH")
        s.do(make(s, "r1", aid, old, W), "applied")

    _register(
        command,
        "lease-generation-mismatch",
        "LEASE-02",
        f"{command} on {world} holding "
        "lease generation 2 (the first expired, T7): the fence of generation 1 with its own "
        "token is refused LEASE_GENERATION_MISMATCH; generation 2's fence applies.",
        generation_body,
    )

    for instant in INSTANTS:

        def expired(s: Scenario, instant: str = instant) -> None:
            aid = setup(s)
            lease = s.agg("r1").leased_lease(aid)
            assert lease is not None
            at = lease.expires_at_ms + _SHIFT[instant]
            taken = _taken(instant, ast.LtE, durable_left=True)
            fence = s.fence("r1", aid, W)
            s.do(
                make(s, "r1", aid, fence, W),
                "rejected:LEASE_EXPIRED" if taken else "applied",
                at=at,
            )

        _register(
            command,
            f"lease-expired-time-{instant}",
            "LEASE-04",
            f"{command} on {world} observed {instant.replace('-', ' ')} its lease's "
            "expires_at_ms (`expires_at_ms <= now` refuses LEASE_EXPIRED).",
            expired,
        )

        def session(s: Scenario, instant: str = instant) -> None:
            aid = setup(s)
            expiry = s.now + 1
            by = dataclasses.replace(W, session_expires_at_ms=expiry)
            taken = _taken(instant, ast.Gt, durable_left=True) is False
            fence = s.fence("r1", aid, W)
            s.do(
                make(s, "r1", aid, fence, by),
                "rejected:WORKER_UNAVAILABLE" if taken else "applied",
                at=expiry + _SHIFT[instant],
            )

        _register(
            command,
            f"worker-unavailable-worker-session-expires-at-ms-time-{instant}",
            "LEASE-04",
            f"{command} on {world} observed {instant.replace('-', ' ')} the "
            "Worker session's expiry (the session must be unexpired: "
            "`session_expires_at_ms > now`, else WORKER_UNAVAILABLE).",
            session,
        )

        def clock_body(s: Scenario, instant: str = instant) -> None:
            aid = setup(s)
            lease = s.agg("r1").leased_lease(aid)
            assert lease is not None
            at = lease.updated_at_ms + _SHIFT[instant]
            taken = _taken(instant, ast.Lt, durable_left=False)
            fence = s.fence("r1", aid, W)
            s.do(
                make(s, "r1", aid, fence, W),
                "rejected:CLOCK_REGRESSION" if taken else "applied",
                at=at,
            )

        _register(
            command,
            f"clock-regression-time-{instant}",
            "RUN-04",
            f"{command} on {world} observed {instant.replace('-', ' ')} the lease's last "
            "change (earlier refuses CLOCK_REGRESSION, V-5).",
            clock_body,
        )
    no_trace(
        command,
        ("lease-run-mismatch",),
        "unreachable",
        "a store loads the aggregate by the command's run id, so every lease in it "
        "carries that run id",
    )


for _command in FENCED:
    _fenced_cases(_command)


# -- expire_with_lease (T7..T10, LEASE-05..LEASE-07) ---------------------------------------------
def _expire_missing(attempt: str, generation: int, rid: str = "r1") -> Body:
    def body(s: Scenario) -> None:
        aid = granted(s)
        s.tick(LEASE_MS)
        s.do(ExpireWithLease(rid, attempt, generation, Profile.EDGE), "rejected:LEASE_MISSING")
        s.expire("r1", aid, expect="applied:released")

    return body


for _name, _args, _what in (
    ("lease-missing-aggregate", ("ghost-a1", 1, "ghost"), "a Run id with no Run"),
    ("lease-missing-attempt", ("r1-zz", 1), "an Attempt the Run does not have"),
    ("lease-missing-lease", ("r1-a1", 2), "a lease generation the Attempt never had"),
):
    _register(
        "expire_with_lease",
        _name,
        "LEASE-05",
        f"expire_with_lease naming {_what} is refused "
        "LEASE_MISSING and writes nothing; the expiry of the real expired lease then applies "
        "(T7).",
        _expire_missing(*_args),
    )
no_trace(
    "expire_with_lease",
    ("lease-run-mismatch",),
    "unreachable",
    "a store loads the aggregate by the command's run id, so every lease in it carries it",
)
no_trace(
    "expire_with_lease",
    ("already-final-attempt-lease-generation",),
    "unreachable",
    "alone: an older lease generation is always released (LEASE-01, T7), so the generation "
    "term never holds without the status one; already-final-lease-status-released covers it",
)


def _expire_released(s: Scenario) -> None:
    aid = granted(s)
    s.tick(LEASE_MS)
    s.expire("r1", aid, expect="applied:released")
    s.expire("r1", aid, expect="replayed:already_final")


def _expire_completed(s: Scenario) -> None:
    aid = _running(s)
    s.do(s.completion("r1", aid, W, s.fence("r1", aid, W)), "applied:completed")
    s.tick(LEASE_MS)
    s.expire("r1", aid, expect="replayed:already_final")


_register(
    "expire_with_lease",
    "already-final-lease-status-released",
    "LEASE-05",
    "expire_with_lease (T10) on a lease an earlier expiry released is a replay "
    "(already_final) and writes nothing.",
    _expire_released,
)
_register(
    "expire_with_lease",
    "already-final-lease-status-completed",
    "LEASE-05",
    "expire_with_lease (T10) on a lease its completion completed, observed after its "
    "expiry time, is a replay (already_final) and writes nothing.",
    _expire_completed,
)


def _expire_cluster(s: Scenario) -> None:
    aid = _running(s)
    s.tick(LEASE_MS)
    s.do(ExpireWithLease("r1", aid, 1, Profile.CLUSTER), "replayed:evidence_required")
    s.expire("r1", aid, expect="applied:lost")


_register(
    "expire_with_lease",
    "evidence-required",
    "LEASE-12",
    "expire_with_lease on a "
    "running Attempt under the cluster flag (E-1) writes nothing (evidence_required); the "
    "same expiry under the edge flag makes it lost (T8).",
    _expire_cluster,
)

for _instant in INSTANTS:

    def _expire_at(s: Scenario, instant: str = _instant) -> None:
        aid = _running(s)
        lease = s.agg("r1").leased_lease(aid)
        assert lease is not None
        at = lease.expires_at_ms + _SHIFT[instant]
        held = _taken(instant, ast.Gt, durable_left=True)  # `expires_at_ms > now`: not expired
        s.do(
            ExpireWithLease("r1", aid, 1, Profile.EDGE),
            "replayed:not_expired" if held else "applied:lost",
            at=at,
        )

    _register(
        "expire_with_lease",
        f"not-expired-time-{_instant}",
        "LEASE-07",
        f"expire_with_lease on a running Attempt observed {_instant.replace('-', ' ')} its "
        "lease's expires_at_ms: not expired before it (T10, nothing written), lost and "
        "released in one step at and after it (T8).",
        _expire_at,
    )

    def _expire_clock(s: Scenario, instant: str = _instant) -> None:
        aid = _running(s)
        s.tick(LEASE_MS + 5)
        s.do(RequestCancel("r1", CancelReason.USER, Actor.USER), "applied")
        at = s.agg("r1").run.updated_at_ms + _SHIFT[instant]
        taken = _taken(instant, ast.Lt, durable_left=False)
        s.do(
            ExpireWithLease("r1", aid, 1, Profile.EDGE),
            "rejected:CLOCK_REGRESSION" if taken else "applied:released",
            at=at,
        )

    _register(
        "expire_with_lease",
        f"clock-regression-time-{_instant}",
        "RUN-04",
        "expire_with_lease of an expired lease whose Run took a cancellation intent after "
        f"the expiry, observed {_instant.replace('-', ' ')} that intent (V-5: earlier "
        "refuses CLOCK_REGRESSION; else T9 releases the lease).",
        _expire_clock,
    )


# -- lost_retry_step: the due time of R5 (§1.8.1, RETRY-07) ----------------------------------------
for _instant in INSTANTS:

    def _due(s: Scenario, instant: str = _instant) -> None:
        aid = s.admit("r1", BACKOFF)
        s.grant("r1", aid, W)
        s.starting("r1", aid, W)
        s.running("r1", aid, W)
        s.tick(LEASE_MS)
        s.expire("r1", aid, expect="applied:lost")
        s.do(LostRetryStep("r1", "r1-a2"), "applied:scheduled")
        policy = s.agg("r1").policy
        assert policy is not None
        assert policy.next_attempt_at_ms is not None
        due = policy.next_attempt_at_ms
        ready = _taken(instant, ast.LtE, durable_left=True)  # `due_at <= observed_at_ms`
        s.do(
            LostRetryStep("r1", "r1-a2"),
            "applied:requeued" if ready else "rejected:NOT_DUE",
            at=due + _SHIFT[instant],
        )

    _register(
        "lost_retry_step",
        f"not-due-time-{_instant}",
        "RETRY-07",
        f"lost_retry_step on a retry_wait Run observed {_instant.replace('-', ' ')} its "
        "next_attempt_at_ms: NOT_DUE before it (R6), requeued with Attempt 2 at and after "
        "it (R5).",
        _due,
    )


# -- request_cancel and converge_cancel (§1.9, E-1) ----------------------------------------------
def _cancel(rid: str = "r1") -> RequestCancel:
    return RequestCancel(rid, CancelReason.USER, Actor.USER)


def _rc_missing(s: Scenario) -> None:
    admitted(s)
    s.do(_cancel("ghost"), "rejected:RUN_NOT_FOUND")
    s.do(_cancel(), "applied")


def _rc_twice(s: Scenario) -> None:
    admitted(s)
    s.do(_cancel(), "applied")
    s.do(_cancel(), "replayed:already_applied")


def _rc_terminal(s: Scenario) -> None:
    admitted(s)
    s.do(_cancel(), "applied")
    s.do(ConvergeCancel("r1"), "applied:converged")
    s.do(_cancel(), "replayed:already_terminal")


_register(
    "request_cancel",
    "run-not-found-aggregate",
    "RUN-05",
    "request_cancel for a Run id "
    "with no Run is refused RUN_NOT_FOUND; the admitted Run's intent applies.",
    _rc_missing,
)
_register(
    "request_cancel",
    "already-applied",
    "RETRY-11",
    "request_cancel twice: the second "
    "finds the intent and is a replay (already_applied) writing nothing.",
    _rc_twice,
)
_register(
    "request_cancel",
    "already-terminal",
    "RETRY-11",
    "request_cancel on a cancelled (terminal) Run is a replay (already_terminal).",
    _rc_terminal,
)


def _cc_missing(s: Scenario) -> None:
    admitted(s)
    s.do(_cancel(), "applied")
    s.do(ConvergeCancel("ghost"), "rejected:RUN_NOT_FOUND")
    s.do(ConvergeCancel("r1"), "applied:converged")


def _cc_no_intent(s: Scenario) -> None:
    admitted(s)
    s.do(ConvergeCancel("r1"), "rejected:NO_CANCEL_INTENT")
    s.do(_cancel(), "applied")
    s.do(ConvergeCancel("r1"), "applied:converged")


def _cc_terminal(s: Scenario) -> None:
    admitted(s)
    s.do(_cancel(), "applied")
    s.do(ConvergeCancel("r1"), "applied:converged")
    s.do(ConvergeCancel("r1"), "replayed:already_terminal")


def _cc_running(s: Scenario) -> None:
    aid = _running(s)
    s.do(_cancel(), "applied")
    s.do(ConvergeCancel("r1"), "rejected:LIVE_EXECUTION")
    s.tick(LEASE_MS)
    s.expire("r1", aid, expect="applied:released")
    s.do(ConvergeCancel("r1"), "applied:converged")


def _cc_claimed(s: Scenario) -> None:
    aid = _started(s)
    granted(s, "r2")
    s.do(_cancel(), "applied")
    s.do(_cancel("r2"), "applied")
    s.do(ConvergeCancel("r1"), "rejected:LIVE_EXECUTION")
    s.do(ConvergeCancel("r2"), "applied:converged")
    assert aid


def _cc_revoked(s: Scenario) -> None:
    aid = _running(s)
    s.do(_cancel(), "applied")
    s.tick(LEASE_MS)
    s.do(ConvergeCancel("r1"), "rejected:LIVE_EXECUTION")  # expired, not yet released
    s.expire("r1", aid, expect="applied:released")
    s.do(ConvergeCancel("r1"), "applied:converged")


for _name, _spec, _text, _body in (
    (
        "run-not-found-aggregate",
        "RUN-05",
        "for a Run id with no Run is refused RUN_NOT_FOUND; the Run with an intent converges",
        _cc_missing,
    ),
    (
        "no-cancel-intent",
        "E-1",
        "without an intent is refused NO_CANCEL_INTENT; after the intent it converges",
        _cc_no_intent,
    ),
    ("already-terminal", "E-1", "on a converged Run is a replay (already_terminal)", _cc_terminal),
    (
        "live-execution-run-status",
        "E-1",
        "on a running Run (a live lease) is refused "
        "LIVE_EXECUTION; once its lease expired and was released (T9) it converges",
        _cc_running,
    ),
    (
        "live-execution-claimed",
        "E-1",
        "on a dispatching Run whose Attempt is starting (not "
        "claimed) is refused LIVE_EXECUTION; one whose Attempt is still claimed converges",
        _cc_claimed,
    ),
    (
        "live-execution-has-revoked-remote-authority",
        "E-1",
        "on a running Run at its lease "
        "expiry but before the release is refused LIVE_EXECUTION; after the release (revoked "
        "authority) it converges",
        _cc_revoked,
    ),
):
    _register("converge_cancel", _name, _spec, f"converge_cancel {_text}.", _body)

for _command in ("request_cancel", "converge_cancel"):
    no_trace(
        _command,
        ("run-not-found-run-run-id",),
        "unreachable",
        "a store loads the aggregate by the command's run id, so the loaded Run id matches",
    )
    for _instant in INSTANTS:

        def _clock(s: Scenario, instant: str = _instant, command: str = _command) -> None:
            admitted(s)
            if command == "converge_cancel":
                s.tick(1)
                s.do(_cancel(), "applied")
            at = s.agg("r1").run.updated_at_ms + _SHIFT[instant]
            taken = _taken(instant, ast.Lt, durable_left=False)
            step = _cancel() if command == "request_cancel" else ConvergeCancel("r1")
            s.do(step, "rejected:CLOCK_REGRESSION" if taken else "applied", at=at)

        _register(
            _command,
            f"clock-regression-time-{_instant}",
            "RUN-04",
            f"{_command} observed {_instant.replace('-', ' ')} the Run's last change "
            "(earlier refuses CLOCK_REGRESSION, V-5).",
            _clock,
        )


# -- the local path L1..L5 (§1.7, §1.8.3, RETRY-18) -----------------------------------------------
#: Why a branch operand cannot hold alone: I-2 pairs the Run status with its latest Attempt's.
_PAIRED = (
    "alone: I-2 pairs a starting Attempt with a dispatching Run and a running one with a running "
    "Run, so this operand never holds without its partner in the same test, whose trace covers "
    "the branch"
)
_BY_RUN_ID = "a store loads the aggregate by the command's run id, so the loaded Run id matches"
_LEGACY = (
    "alone: a legacy-owned Run never leaves `queued` (grant_lease and activate_local refuse it "
    "NOT_RUNTIME_OWNED), so the status term of the same test always answers with it"
)


def _local(s: Scenario, rid: str, **kw: Any) -> str:
    """A queued Run of the local executor type: its pristine claimed Attempt 1."""
    return s.admit(rid, NO_BACKOFF, executor=LOCAL, **kw)


def _activate(rid: str, aid: str, sequence: int = 1) -> ActivateLocal:
    return ActivateLocal(rid, aid, LOCAL, sequence, CALLBACK)


def _local_started(s: Scenario, rid: str, **kw: Any) -> str:
    """A local Attempt past L1: `starting`, its Run `dispatching`, holding the callback digest."""
    aid = _local(s, rid, **kw)
    s.do(_activate(rid, aid), "applied")
    return aid


def _handle(s: Scenario, rid: str, aid: str, handle: str | None = None) -> RecordLocalHandle:
    return RecordLocalHandle(rid, aid, handle or f"pid:{rid}", _created_at(s, rid, aid))


def _local_running(s: Scenario, rid: str, **kw: Any) -> str:
    """A local Attempt past L2: `running` with its handle and start time (the creation time)."""
    aid = _local_started(s, rid, **kw)
    s.do(_handle(s, rid, aid), "applied")
    return aid


def _receipt(s: Scenario, rid: str, aid: str, **changes: Any) -> LocalReceipt:
    """The authenticated receipt of L3 for the Attempt, `changes` making one field differ."""
    attempt = s.agg(rid).attempt(aid)
    assert attempt is not None
    started = attempt.started_at_ms if attempt.started_at_ms is not None else attempt.created_at_ms
    receipt = LocalReceipt(
        rid, aid, attempt.callback_sequence, CALLBACK, CompletionOutcome.SUCCEEDED, started, 0
    )
    return dataclasses.replace(receipt, **changes)


def _remote_started(s: Scenario, rid: str) -> str:
    aid = granted(s, rid)
    s.starting(rid, aid, W)
    return aid


def _clock_trio(
    s: Scenario, command: Callable[[str], Command], applied: str, durable: Callable[[], int]
) -> None:
    """The three instants of V-5 on two Runs `c1`, `c2` in the same state: `c1` observed one
    ms before `durable()` is refused CLOCK_REGRESSION, then applies at it; `c2` applies one ms
    after it. Each expectation is the comparison's (`observed < durable` refuses)."""
    at = durable()
    for rid, instant in (("c1", "one-ms-before"), ("c1", "equal"), ("c2", "one-ms-after")):
        taken = _taken(instant, ast.Lt, durable_left=False)
        s.do(
            command(rid), "rejected:CLOCK_REGRESSION" if taken else applied, at=at + _SHIFT[instant]
        )


_CLOCK_NAMES = tuple(f"clock-regression-time-{i}" for i in INSTANTS)


def _shared_clock(command: str, what: str, body: Body) -> None:
    _register_shared(
        command,
        _CLOCK_NAMES,
        "clock-regression",
        "RUN-04",
        f"{command} {what}: observed one ms before the Run's last change it is refused "
        "CLOCK_REGRESSION (V-5) and writes nothing; at that instant and one ms after it applies.",
        body=body,
    )


def _al_refusals(s: Scenario) -> None:
    _local(s, "r1")
    _local(s, "legacy", owner=RunOwner.LEGACY)
    admitted(s, "remote")  # the `shell` executor type
    _local(s, "intent")
    s.do(RequestCancel("intent", CancelReason.USER, Actor.USER), "applied")
    _local(s, "offered")
    s.grant("offered", "offered-a1", W_LOCAL)
    _local_started(s, "retried")
    s.do(RecoverLocalStartup("retried", "retried-a1", NotRunningEvidence()), "applied:lost")
    s.do(LostRetryStep("retried", "retried-a2"), "applied:scheduled")
    s.do(LostRetryStep("retried", "retried-a2"), "applied:requeued")
    s.tick(LEASE_MS)
    s.expire("offered", "offered-a1", expect="applied:released")  # queued, claimed, offered
    s.do(_activate("ghost", "ghost-a1"), "rejected:RUN_NOT_FOUND")
    s.do(_activate("r1", "r1-zz"), "rejected:ATTEMPT_NOT_FOUND")
    s.do(_activate("retried", "retried-a1"), "rejected:ATTEMPT_NOT_LATEST")
    s.do(_activate("legacy", "legacy-a1"), "rejected:NOT_RUNTIME_OWNED")
    s.do(_activate("remote", "remote-a1"), "rejected:EXECUTOR_TYPE_MISMATCH")
    s.do(_activate("offered", "offered-a1"), "rejected:EXECUTOR_TYPE_MISMATCH")
    s.do(_activate("intent", "intent-a1"), "rejected:CANCEL_REQUESTED")
    s.do(_activate("r1", "r1-a1"), "applied")
    s.do(_activate("r1", "r1-a1", 2), "raced:NOT_ELIGIBLE")
    s.do(_activate("retried", "retried-a2"), "applied")


_register_shared(
    "activate_local",
    (
        "run-not-found-aggregate",
        "attempt-not-found",
        "attempt-not-latest",
        "not-runtime-owned-legacy",
        "executor-type-mismatch-attempt-executor-type",
        "executor-type-mismatch-attempt-lease-generation",
        "cancel-requested",
        "not-eligible-run-status",
    ),
    "refusals",
    "RETRY-18",
    "activate_local (L1) refused on each check in order: a Run id with no Run "
    "(RUN_NOT_FOUND), an Attempt the Run does not have (ATTEMPT_NOT_FOUND), Attempt 1 of a Run a "
    "lost retry requeued with Attempt 2 (ATTEMPT_NOT_LATEST), a legacy-owned Run "
    "(NOT_RUNTIME_OWNED), a `shell` Attempt and a local Attempt once offered to a remote Worker "
    "(its lease expired: EXECUTOR_TYPE_MISMATCH), a Run with a cancellation intent "
    "(CANCEL_REQUESTED); the eligible Attempt applies, and its second activation finds the Run "
    "dispatching and the Attempt starting (raced NOT_ELIGIBLE: one spawn).",
    body=_al_refusals,
)
no_trace("activate_local", ("not-eligible-attempt-status",), "unreachable", _PAIRED)
no_trace("activate_local", ("run-not-found-run-run-id",), "unreachable", _BY_RUN_ID)
no_trace(
    "activate_local",
    ("callback-sequence-stale",),
    "unreachable",
    "a claimed Attempt without lease rows has callback_sequence 0 (only L1, which leaves it "
    "starting, and completions, which finish it, advance it) and a command's sequence is at "
    "least 1",
)


def _al_clock(s: Scenario) -> None:
    _local(s, "c1")
    _local(s, "c2")
    _clock_trio(s, lambda rid: _activate(rid, f"{rid}-a1"), "applied", lambda: s.now)


_shared_clock("activate_local", "of a queued local Run", _al_clock)


def _rh_refusals(s: Scenario) -> None:
    aid = _local_started(s, "r1")
    _remote_started(s, "remote")
    done = _local_running(s, "done")
    s.do(CompleteLocal("done", done, _receipt(s, "done", done)), "applied:completed")
    s.do(RecordLocalHandle("ghost", "ghost-a1", "pid:ghost", s.now), "rejected:RUN_NOT_FOUND")
    s.do(RecordLocalHandle("r1", "r1-zz", "pid:r1", s.now), "rejected:ATTEMPT_NOT_FOUND")
    s.do(_handle(s, "remote", "remote-a1"), "rejected:INVALID_TRANSITION")
    s.do(_handle(s, "done", done), "replayed:already_terminal")
    early = RecordLocalHandle("r1", aid, "pid:r1", _created_at(s, "r1", aid) - 1)
    s.do(early, "rejected:START_TIME_INVALID")
    s.do(_handle(s, "r1", aid), "applied")
    s.do(_handle(s, "r1", aid), "replayed:already_applied")
    s.do(_handle(s, "r1", aid, "pid:other"), "rejected:HANDLE_CONFLICT")


_register_shared(
    "record_local_handle",
    (
        "run-not-found-aggregate",
        "attempt-not-found",
        "invalid-transition",
        "already-terminal",
        "start-time-invalid",
        "already-applied",
        "handle-conflict",
    ),
    "refusals",
    "RETRY-18",
    "record_local_handle (L2) on each branch: a Run id with no Run (RUN_NOT_FOUND), an Attempt "
    "the Run does not have (ATTEMPT_NOT_FOUND), a remote starting Attempt (not local: "
    "INVALID_TRANSITION), a completed local Attempt (already_terminal), a start time one ms "
    "before the Attempt's creation (START_TIME_INVALID); the handle applies, the same handle "
    "again is a replay (already_applied) and another handle is refused HANDLE_CONFLICT.",
    body=_rh_refusals,
)
no_trace(
    "record_local_handle",
    ("invalid-transition-attempt-status",),
    "unreachable",
    "an activated (local) Attempt is starting, running or final, and the branches before answer "
    "running and final",
)
no_trace("record_local_handle", ("invalid-transition-run-status",), "unreachable", _PAIRED)
no_trace("record_local_handle", ("run-not-found-run-run-id",), "unreachable", _BY_RUN_ID)


def _rh_clock(s: Scenario) -> None:
    _local_started(s, "c1")
    _local_started(s, "c2")
    _clock_trio(s, lambda rid: _handle(s, rid, f"{rid}-a1"), "applied", lambda: s.now)


_shared_clock("record_local_handle", "of a starting local Attempt", _rh_clock)


def _cl_refusals(s: Scenario) -> None:
    aid = _local_running(s, "r1")
    _local(s, "pristine")
    started = _local_started(s, "started")
    receipt = _receipt(s, "r1", aid)
    s.do(CompleteLocal("ghost", "ghost-a1", receipt), "rejected:RUN_NOT_FOUND")
    s.do(CompleteLocal("r1", "r1-zz", receipt), "rejected:ATTEMPT_NOT_FOUND")
    unauthenticated = "rejected:RECEIPT_UNAUTHENTICATED"
    s.do(CompleteLocal("pristine", "pristine-a1", receipt), unauthenticated)
    for change in (
        {"run_id": "other"},
        {"attempt_id": "r1-zz"},
        {"callback_sequence": receipt.callback_sequence + 1},
        {"token_sha256": token_digest("other-receipt-token".ljust(40, "o"))},
        {"started_at_ms": receipt.started_at_ms + 1},
    ):
        s.do(CompleteLocal("r1", aid, dataclasses.replace(receipt, **change)), unauthenticated)
    early = _receipt(s, "started", started)
    early = dataclasses.replace(early, started_at_ms=early.started_at_ms - 1)
    s.do(CompleteLocal("started", started, early), "rejected:START_TIME_INVALID")
    s.do(CompleteLocal("r1", aid, receipt), "applied:completed")
    s.do(CompleteLocal("r1", aid, receipt), "replayed:already_terminal")


_register_shared(
    "complete_local",
    (
        "run-not-found-aggregate",
        "attempt-not-found",
        "receipt-unauthenticated-attempt-callback-token-sha256",
        "receipt-unauthenticated-receipt-run-id",
        "receipt-unauthenticated-receipt-attempt-id",
        "receipt-unauthenticated-receipt-callback-sequence",
        "receipt-unauthenticated-digests-equal",
        "receipt-unauthenticated-attempt-started-at-ms",
        "start-time-invalid",
        "already-terminal",
    ),
    "refusals",
    "RETRY-18",
    "complete_local (L3) on each branch: a Run id with no Run (RUN_NOT_FOUND), an Attempt the "
    "Run does not have (ATTEMPT_NOT_FOUND); RECEIPT_UNAUTHENTICATED for a never-activated "
    "Attempt (no callback digest) and for a receipt whose run id, attempt id, callback "
    "sequence, token digest or start time alone differs; a receipt of a starting Attempt "
    "started one ms before its creation (START_TIME_INVALID); the authenticated receipt "
    "completes the Attempt and the same receipt again is a replay (already_terminal).",
    body=_cl_refusals,
)
no_trace(
    "complete_local",
    ("invalid-transition",),
    "unreachable",
    "an authenticated receipt names an activated (local) Attempt, which is starting, running "
    "or final (lost included), and final is answered before",
)
no_trace("complete_local", ("run-not-found-run-run-id",), "unreachable", _BY_RUN_ID)


def _cl_clock(s: Scenario) -> None:
    _local_running(s, "c1")
    _local_running(s, "c2")
    _clock_trio(
        s,
        lambda rid: CompleteLocal(rid, f"{rid}-a1", _receipt(s, rid, f"{rid}-a1")),
        "applied:completed",
        lambda: s.now,
    )


_shared_clock("complete_local", "of a running local Attempt", _cl_clock)


def _stop(rid: str, aid: str) -> RecordLocalStop:
    return RecordLocalStop(rid, aid, StopResult.TERMINATION_REQUESTED)


def _ls_refusals(s: Scenario) -> None:
    aid = _local_running(s, "r1")
    admitted(s, "remote")
    s.grant("remote", "remote-a1", W)
    s.starting("remote", "remote-a1", W)
    s.running("remote", "remote-a1", W)
    done = _local_running(s, "done")
    s.do(CompleteLocal("done", done, _receipt(s, "done", done)), "applied:completed")
    _local_running(s, "plain")
    _local_started(s, "started")
    for rid in ("r1", "remote", "started"):
        s.do(_cancel(rid), "applied")
    s.do(_stop("ghost", "ghost-a1"), "rejected:RUN_NOT_FOUND")
    s.do(_stop("r1", "r1-zz"), "rejected:ATTEMPT_NOT_FOUND")
    s.do(_stop("remote", "remote-a1"), "rejected:INVALID_TRANSITION")
    s.do(_stop("done", done), "replayed:already_terminal")
    s.do(_stop("plain", "plain-a1"), "rejected:STOP_NOT_APPLICABLE")
    s.do(_stop("started", "started-a1"), "rejected:INVALID_TRANSITION")
    s.do(_stop("r1", aid), "applied:stopped")


_register_shared(
    "record_local_stop",
    (
        "run-not-found-aggregate",
        "attempt-not-found",
        "invalid-transition",
        "already-terminal",
        "stop-not-applicable",
        "invalid-transition-attempt-status",
    ),
    "refusals",
    "RETRY-18",
    "record_local_stop (L4/L5) on each branch: a Run id with no Run (RUN_NOT_FOUND), an "
    "Attempt the Run does not have (ATTEMPT_NOT_FOUND), a remote running Attempt with an intent "
    "(not local: INVALID_TRANSITION), a completed local Attempt (already_terminal), a running "
    "local Attempt without an intent (STOP_NOT_APPLICABLE), a starting one with an intent (not "
    "running: INVALID_TRANSITION); the running Attempt with an intent is stopped (cancelled).",
    body=_ls_refusals,
)
no_trace("record_local_stop", ("invalid-transition-run-status",), "unreachable", _PAIRED)
no_trace("record_local_stop", ("run-not-found-run-run-id",), "unreachable", _BY_RUN_ID)


def _ls_clock(s: Scenario) -> None:
    _local_running(s, "c1")
    _local_running(s, "c2")
    s.tick(1)
    s.do(_cancel("c1"), "applied")
    s.do(_cancel("c2"), "applied")
    _clock_trio(s, lambda rid: _stop(rid, f"{rid}-a1"), "applied:stopped", lambda: s.now)


_shared_clock("record_local_stop", "of a running local Attempt whose Run took an intent", _ls_clock)


# -- the recovery commands (§2.2, §2.3; REC-01, REC-03, REC-07, REC-12) ----------------------------
def _rls_refusals(s: Scenario) -> None:
    aid = _local_started(s, "r1")
    _remote_started(s, "remote")
    _local_started(s, "flow", kind=RunKind.WORKFLOW)
    gone = NotRunningEvidence()
    conflict = CompletedEvidence(CompletionOutcome.SUCCEEDED, 2, 0)
    s.do(RecoverLocalStartup("ghost", "ghost-a1", gone), "raced:NOT_ELIGIBLE")
    s.do(RecoverLocalStartup("r1", "r1-zz", gone), "raced:NOT_ELIGIBLE")
    s.do(RecoverLocalStartup("remote", "remote-a1", gone), "raced:NOT_ELIGIBLE")
    s.do(RecoverLocalStartup("flow", "flow-a1", gone), "raced:NOT_ELIGIBLE")
    s.do(RecoverLocalStartup("r1", aid, conflict), "rejected:receipt_conflict")
    s.do(RecoverLocalStartup("r1", aid, gone), "applied:lost")
    s.do(RecoverLocalStartup("r1", aid, gone), "raced:NOT_ELIGIBLE")


_register_shared(
    "recover_local_startup",
    (
        "not-eligible-aggregate",
        "not-eligible-latest-attempt-id",
        "not-eligible-latest-is-local",
        "not-eligible-run-kind-workflow",
        "receipt-conflict",
        "not-eligible-run-status",
    ),
    "refusals",
    "REC-07",
    "recover_local_startup (§2.2) raced NOT_ELIGIBLE for a Run id with no Run, an Attempt "
    "that is not the latest, a remote starting Attempt (not local) and a local Workflow Run; a "
    "receipt whose callback sequence is not the activation's is refused RECEIPT_CONFLICT; "
    "not_running evidence makes the eligible Attempt lost, and the same command on the lost Run "
    "(neither dispatching nor running) is raced NOT_ELIGIBLE.",
    body=_rls_refusals,
)
no_trace("recover_local_startup", ("not-eligible-latest-status",), "unreachable", _PAIRED)
no_trace("recover_local_startup", ("not-eligible-run-owner-legacy",), "unreachable", _LEGACY)
no_trace(
    "recover_local_startup",
    ("not-eligible-latest",),
    "unreachable",
    "alone: only a created Run has no Attempt, and its status fails the same test",
)
no_trace("recover_local_startup", ("not-eligible-run-run-id",), "unreachable", _BY_RUN_ID)


def _rls_clock(s: Scenario) -> None:
    _local_started(s, "c1")
    _local_started(s, "c2")
    _clock_trio(
        s,
        lambda rid: RecoverLocalStartup(rid, f"{rid}-a1", NotRunningEvidence()),
        "applied:lost",
        lambda: s.now,
    )


_shared_clock("recover_local_startup", "with not_running evidence", _rls_clock)


def _foc_refusals(s: Scenario) -> None:
    s.do(CreateRun("old", "project", "task", 1, LOCAL), "applied")
    s.do(CreateRun("legacy", "project", "task", 1, LOCAL, owner=RunOwner.LEGACY), "applied")
    s.do(CreateRun("flow", "project", "task", 1, LOCAL, kind=RunKind.WORKFLOW), "applied")
    _local(s, "queued")
    created = s.agg("old").run.created_at_ms
    s.tick(10)
    started = s.now
    s.do(FailOrphanedCreated("ghost", started), "raced:NOT_ELIGIBLE")
    s.do(FailOrphanedCreated("queued", started), "raced:NOT_ELIGIBLE")
    s.do(FailOrphanedCreated("legacy", started), "raced:NOT_ELIGIBLE")
    s.do(FailOrphanedCreated("flow", started), "raced:NOT_ELIGIBLE")
    for instant in ("one-ms-before", "equal", "one-ms-after"):
        orphaned = _taken(instant, ast.Lt, durable_left=True)  # `created_at_ms < started`
        step = FailOrphanedCreated("old", created + _SHIFT[instant])
        s.do(step, "applied" if orphaned else "raced:NOT_ELIGIBLE")


_register_shared(
    "fail_orphaned_created",
    (
        "not-eligible-aggregate",
        "not-eligible-run-status",
        "not-eligible-run-owner-legacy",
        "not-eligible-run-kind-workflow",
        *(f"not-eligible-run-created-at-ms-time-{i}" for i in INSTANTS),
    ),
    "refusals",
    "REC-12",
    "fail_orphaned_created (§2.2, B-30) raced NOT_ELIGIBLE for a Run id with no Run, a queued "
    "Run, a legacy-owned and a Workflow created Run; for a created Run with a process start one "
    "ms before and equal to its creation (not from before the process: NOT_ELIGIBLE), then one "
    "ms after it (RUN_ORPHANED_CREATED applied).",
    body=_foc_refusals,
)
no_trace("fail_orphaned_created", ("not-eligible-run-run-id",), "unreachable", _BY_RUN_ID)


def _foc_clock(s: Scenario) -> None:
    for rid in ("c1", "c2"):
        s.do(CreateRun(rid, "project", "task", 1, LOCAL), "applied")
    started = s.tick(5)
    s.tick(5)
    s.do(_cancel("c1"), "applied")  # an intent moves the Run's last change past the creation
    s.do(_cancel("c2"), "applied")
    _clock_trio(s, lambda rid: FailOrphanedCreated(rid, started), "applied", lambda: s.now)


_shared_clock(
    "fail_orphaned_created", "of a created Run that took an intent after its creation", _foc_clock
)


def _rr_refusals(s: Scenario) -> None:
    aid = _running(s)
    lease = s.agg("r1").leased_lease(aid)
    assert lease is not None
    expiry = lease.expires_at_ms
    admitted(s, "flow", kind=RunKind.WORKFLOW)
    s.grant("flow", "flow-a1", W)
    s.starting("flow", "flow-a1", W)
    s.running("flow", "flow-a1", W)
    granted(s, "requeued")
    _running(s, "lost")
    s.tick(LEASE_MS)  # every lease above was granted at the same instant: all expire now
    assert s.now == expiry
    s.expire("requeued", "requeued-a1", expect="applied:released")  # T7: queued, not pristine
    s.expire("lost", "lost-a1", expect="applied:lost")  # T8: the Run and its Attempt lost
    gone = NotRunningEvidence()
    s.do(RecoverRuntime("ghost", "ghost-a1", gone), "raced:NOT_ELIGIBLE")
    s.do(RecoverRuntime("r1", "r1-zz", gone), "raced:NOT_ELIGIBLE")
    s.do(RecoverRuntime("flow", "flow-a1", gone), "raced:NOT_ELIGIBLE")
    s.do(RecoverRuntime("requeued", "requeued-a1", gone), "raced:NOT_ELIGIBLE")
    s.do(RecoverRuntime("lost", "lost-a1", gone), "raced:NOT_ELIGIBLE")
    for instant in ("one-ms-before", "equal", "one-ms-after"):
        expired = _taken(instant, ast.LtE, durable_left=True)  # `expires_at_ms <= now`
        expect = "replayed:evidence_required" if expired else "raced:NOT_ELIGIBLE"
        s.do(RecoverRuntime("r1", aid, None), expect, at=expiry + _SHIFT[instant])
    conflict = CompletedEvidence(CompletionOutcome.SUCCEEDED, 0, 0)
    s.do(RecoverRuntime("r1", aid, conflict), "rejected:receipt_conflict")
    s.do(RecoverRuntime("r1", aid, gone), "applied:lost")


_register_shared(
    "recover_runtime",
    (
        "not-eligible-aggregate",
        "not-eligible-latest-attempt-id",
        "not-eligible-run-kind-ordinary",
        "not-eligible-run-status",
        "not-eligible-latest-status",
        "not-eligible-leased",
        *(f"not-eligible-leased-expires-at-ms-time-{i}" for i in INSTANTS),
        "evidence-required",
        "receipt-conflict",
    ),
    "refusals",
    "REC-03",
    "recover_runtime (§2.3) at a running Attempt's lease expiry: raced NOT_ELIGIBLE for a Run "
    "id with no Run, an Attempt that is not the latest, a running Workflow Run, a queued Run "
    "whose claimed Attempt's lease expired (T7) and a lost Run; the running Attempt observed one "
    "ms before its expires_at_ms (a live lease: NOT_ELIGIBLE), at it and one ms after it without "
    "evidence (evidence_required, nothing written: a timeout alone never makes it lost); a "
    "completion that does not advance the callback sequence is refused RECEIPT_CONFLICT and "
    "not_running evidence makes it lost.",
    body=_rr_refusals,
)
no_trace("recover_runtime", ("not-eligible-run-owner-runtime",), "unreachable", _LEGACY)
no_trace(
    "recover_runtime",
    ("not-eligible-latest",),
    "unreachable",
    "alone: only a created Run has no Attempt, and its status fails the same test",
)
no_trace(
    "recover_runtime",
    ("not-eligible-attempt-is-pristine", "not-eligible-next"),
    "unreachable",
    "alone: a pristine claimed Attempt (no lease row, no activation) belongs to a queued Run "
    "(I-2: a dispatching Run's claimed Attempt holds a lease, a local one is starting), whose "
    "status fails the same test",
)
no_trace(
    "recover_runtime",
    ("not-eligible-leased-status-completed", "not-eligible-leased-status-released"),
    "unreachable",
    "`leased_lease` returns only a lease whose status is leased, and a claimed candidate (its "
    "Run dispatching) always holds one: a released claim is queued again (T7)",
)
no_trace("recover_runtime", ("not-eligible-run-run-id",), "unreachable", _BY_RUN_ID)


def _rr_clock(s: Scenario) -> None:
    granted(s, "c1")
    granted(s, "c2")
    s.tick(LEASE_MS + 5)
    s.do(_cancel("c1"), "applied")  # an intent after the expiry moves the Run's last change
    s.do(_cancel("c2"), "applied")
    _clock_trio(
        s, lambda rid: RecoverRuntime(rid, f"{rid}-a1", None), "applied:released", lambda: s.now
    )


_shared_clock(
    "recover_runtime",
    "of an expired claimed Attempt whose Run took an intent after the expiry (B-36 release)",
    _rr_clock,
)


# -- lost_retry_step: eligibility, clock and the new Attempt id (§1.8.1; RETRY-09, RETRY-12) -------
def _lost(s: Scenario, rid: str, policy: PolicyDefinition | None = NO_BACKOFF, **kw: Any) -> str:
    """A remote Run lost at its lease expiry (T8): admitted, granted, starting, running."""
    aid = s.admit(rid, policy, **kw)
    s.grant(rid, aid, W)
    s.starting(rid, aid, W)
    s.running(rid, aid, W)
    return aid


def _lr_refusals(s: Scenario) -> None:
    for rid, policy, kw in (
        ("r1", NO_BACKOFF, {}),
        ("flow", NO_BACKOFF, {"kind": RunKind.WORKFLOW}),
        ("intent", NO_BACKOFF, {}),
        ("failed", None, {}),
    ):
        _lost(s, rid, policy, **kw)
    s.tick(LEASE_MS)
    for rid in ("r1", "flow", "intent", "failed"):
        s.expire(rid, f"{rid}-a1", expect="applied:lost")
    s.do(_cancel("intent"), "applied")
    s.do(LostRetryStep("failed", "failed-a2"), "applied:failed_disabled")  # R1: no policy
    s.do(LostRetryStep("ghost", "ghost-a2"), "raced:NOT_ELIGIBLE")
    s.do(LostRetryStep("flow", "flow-a2"), "raced:NOT_ELIGIBLE")
    s.do(LostRetryStep("intent", "intent-a2"), "raced:NOT_ELIGIBLE")
    s.do(LostRetryStep("failed", "failed-a2"), "raced:NOT_ELIGIBLE")
    s.do(LostRetryStep("r1", "r1-a2"), "applied:scheduled")
    s.do(LostRetryStep("r1", "r1-a1"), "rejected:ATTEMPT_ID_CONFLICT")
    s.do(LostRetryStep("r1", "r1-a2"), "applied:requeued")


_register_shared(
    "lost_retry_step",
    (
        "not-eligible-aggregate",
        "not-eligible-run-kind-workflow",
        "not-eligible-run-has-cancel-intent",
        "not-eligible-run-status",
        "attempt-id-conflict",
    ),
    "refusals",
    "RETRY-12",
    "lost_retry_step (§1.8.1) raced NOT_ELIGIBLE for a Run id with no Run, a lost Workflow Run, "
    "a lost Run with a cancellation intent and a Run failed by R1 (its latest Attempt still "
    "lost); a due requeue naming an Attempt id the Run already has is refused "
    "ATTEMPT_ID_CONFLICT and writes nothing, then requeues with the new id.",
    body=_lr_refusals,
)
no_trace("lost_retry_step", ("not-eligible-run-owner-legacy",), "unreachable", _LEGACY)
no_trace(
    "lost_retry_step",
    ("not-eligible-latest", "not-eligible-latest-status"),
    "unreachable",
    "alone: a `lost` or `retry_wait` Run's latest Attempt is lost (T8 and §2.1 mark both, R4 "
    "keeps it), so only a Run whose status fails the same test has another latest Attempt",
)
no_trace("lost_retry_step", ("not-eligible-run-run-id",), "unreachable", _BY_RUN_ID)


def _lr_clock(s: Scenario) -> None:
    _lost(s, "c1")
    _lost(s, "c2")
    s.tick(LEASE_MS)
    s.expire("c1", "c1-a1", expect="applied:lost")
    s.expire("c2", "c2-a1", expect="applied:lost")
    _clock_trio(s, lambda rid: LostRetryStep(rid, f"{rid}-a2"), "applied:scheduled", lambda: s.now)


_shared_clock("lost_retry_step", "of a lost Run (R4 schedules it)", _lr_clock)


# -- the fenced writes' own branches (T2r/T2x, T3, T4r, T5 replay, T6r; LEASE-03, LEASE-09) --------
_NOT_LEASED = "rejected:LEASE_NOT_LEASED"


def _completed(s: Scenario, rid: str) -> Fence:
    """A Run completed under its lease (T6): returns the completion's fence (now stale)."""
    aid = _running(s, rid)
    fence = s.fence(rid, aid, W)
    s.do(s.completion(rid, aid, W, fence), "applied:completed")
    return fence


def _lost_fence(s: Scenario, rid: str) -> Fence:
    """A running Run made lost at its lease expiry (T8, lease released): its old fence."""
    aid = _running(s, rid)
    fence = s.fence(rid, aid, W)
    lease = s.agg(rid).leased_lease(aid)
    assert lease is not None
    s.do(ExpireWithLease(rid, aid, 1, Profile.EDGE), "applied:lost", at=lease.expires_at_ms)
    return fence


def _fw_world(s: Scenario) -> dict[str, Fence]:
    """`claimed` (leased, not started), `started`, `running`, `done` (completed) and `lost`
    (released by T8), all granted at one instant; the fences their Worker holds."""
    fences = {"claimed": s.fence("claimed", granted(s, "claimed"), W)}
    fences["started"] = s.fence("started", _started(s, "started"), W)
    fences["running"] = s.fence("running", _running(s, "running"), W)
    fences["done"] = _completed(s, "done")
    fences["lost"] = _lost_fence(s, "lost")
    return fences


def _as_refusals(s: Scenario) -> None:
    f = _fw_world(s)

    def ack(rid: str) -> AcknowledgeStarting:
        return AcknowledgeStarting(rid, f"{rid}-a1", f[rid], W)

    s.do(ack("started"), "replayed:already_applied")
    s.do(ack("running"), "replayed:already_running")
    s.do(ack("done"), "replayed:already_terminal")
    s.do(ack("lost"), _NOT_LEASED)
    s.do(ack("claimed"), "applied")


_register_shared(
    "acknowledge_starting",
    (
        "already-applied-attempt-status",
        "already-applied-lease-status-leased",
        "already-running",
        "already-terminal-attempt-status",
        "lease-not-leased-released",
    ),
    "replays",
    "LEASE-09",
    "acknowledge_starting with the Worker's own fence on an Attempt already starting under it "
    "(T2r: already_applied), running (T2x: already_running), completed (already_terminal), and "
    "lost with its lease released (the authority was revoked: LEASE_NOT_LEASED); a leased "
    "claimed Attempt applies.",
    body=_as_refusals,
)
no_trace(
    "acknowledge_starting",
    ("lease-not-leased-completed",),
    "unreachable",
    "a completed lease belongs to a terminal Attempt (T6), which `_released_replay` answers "
    "first (already_terminal)",
)


def _rn_refusals(s: Scenario) -> None:
    f = _fw_world(s)
    failed = _fail_start(s, "failed")
    s.do(failed, "applied")

    def renew(rid: str, fence: Fence, duration: int = LEASE_MS) -> RenewLease:
        return RenewLease(rid, f"{rid}-a1", fence, W, duration)

    s.do(renew("done", f["done"]), _NOT_LEASED)
    s.do(renew("failed", failed.fence), _NOT_LEASED)
    s.do(renew("claimed", f["claimed"]), "rejected:INVALID_TRANSITION")
    s.do(renew("started", f["started"], 4_999), "rejected:LEASE_DURATION_INVALID")
    s.do(renew("started", f["started"]), "applied")


def _fail_start(s: Scenario, rid: str) -> FailStart:
    """A starting Attempt and the fail_start (T5) its Worker would send."""
    aid = _started(s, rid)
    return FailStart(rid, aid, s.fence(rid, aid, W), W)


_register_shared(
    "renew_lease",
    (
        "lease-not-leased-completed",
        "lease-not-leased-released",
        "invalid-transition",
        "lease-duration-invalid",
    ),
    "refusals",
    "LEASE-09",
    "renew_lease (T3) with the Worker's own fence of a completed lease and of a lease released "
    "by a start failure (LEASE_NOT_LEASED), of a leased claimed Attempt (not started: "
    "INVALID_TRANSITION), with a duration of 4 999 ms (LEASE_DURATION_INVALID); the starting "
    "Attempt's renew applies.",
    body=_rn_refusals,
)


def _ar_refusals(s: Scenario) -> None:
    f = _fw_world(s)

    def ack(rid: str, handle: str | None = None, started: int | None = None) -> AcknowledgeRunning:
        aid = f"{rid}-a1"
        at = _created_at(s, rid, aid) if started is None else started
        return AcknowledgeRunning(rid, aid, f[rid], W, handle or f"pid:{aid}", at)

    running = s.agg("running").attempt("running-a1")
    assert running is not None
    assert running.started_at_ms is not None
    s.do(ack("running", started=running.started_at_ms), "replayed:already_applied")
    s.do(ack("running", "pid:other", running.started_at_ms), "rejected:HANDLE_CONFLICT")
    s.do(ack("done"), "replayed:already_terminal")
    s.do(ack("lost"), _NOT_LEASED)
    s.do(ack("claimed"), "rejected:INVALID_TRANSITION")
    early = _created_at(s, "started", "started-a1") - 1
    s.do(ack("started", started=early), "rejected:START_TIME_INVALID")
    s.do(ack("started"), "applied")


_register_shared(
    "acknowledge_running",
    (
        "already-applied",
        "handle-conflict-attempt-status",
        "handle-conflict-lease-status-leased",
        "already-terminal-attempt-status",
        "lease-not-leased-released",
        "invalid-transition",
        "start-time-invalid",
    ),
    "replays",
    "LEASE-09",
    "acknowledge_running with the Worker's own fence: on its running Attempt the same handle is "
    "a replay (T4r: already_applied) and another handle HANDLE_CONFLICT; a completed Attempt is "
    "already_terminal, a lost one (lease released) LEASE_NOT_LEASED, a leased claimed one "
    "INVALID_TRANSITION; a start time one ms before the Attempt's creation is refused "
    "START_TIME_INVALID and the starting Attempt's acknowledgement applies.",
    body=_ar_refusals,
)
no_trace(
    "acknowledge_running",
    ("already-running",),
    "unreachable",
    "a running Attempt's current lease is leased (answered before) until T8 or §2.1 release it, "
    "which makes the Attempt lost",
)
no_trace(
    "acknowledge_running",
    ("lease-not-leased-completed",),
    "unreachable",
    "a completed lease belongs to a terminal Attempt (T6), which `_released_replay` answers "
    "first (already_terminal)",
)


def _fs_refusals(s: Scenario) -> None:
    f = _fw_world(s)
    command = _fail_start(s, "failed")
    s.do(command, "applied")
    s.do(command, "replayed:already_applied")
    s.do(dataclasses.replace(command, failure_code="OTHER_FAILURE"), _NOT_LEASED)
    stale = dataclasses.replace(command.fence, expected_version=command.fence.expected_version + 1)
    s.do(dataclasses.replace(command, fence=stale), _NOT_LEASED)
    s.do(FailStart("done", "done-a1", f["done"], W), _NOT_LEASED)
    s.do(FailStart("claimed", "claimed-a1", f["claimed"], W), "rejected:INVALID_TRANSITION")


_register_shared(
    "fail_start",
    (
        "already-applied-attempt-status",
        "already-applied-lease-status-released",
        "already-applied-lease-release-reason",
        "already-applied-lease-version",
        "already-applied-attempt-error-code",
        "lease-not-leased-released",
        "lease-not-leased-completed",
        "invalid-transition",
    ),
    "replays",
    "LEASE-09",
    "fail_start (T5) applied, then the identical command is a replay (already_applied: failed "
    "Attempt, lease released start_failed at the expected version + 1, same failure code); the "
    "same command with another failure code alone, or expecting another lease version alone, is "
    "no replay and meets the released lease (LEASE_NOT_LEASED); a completed lease is "
    "LEASE_NOT_LEASED and a leased claimed Attempt INVALID_TRANSITION.",
    body=_fs_refusals,
)


def _cw_refusals(s: Scenario) -> None:
    f = _fw_world(s)
    done = s.completion("done", "done-a1", W, f["done"])
    s.do(done, "replayed:already_terminal")
    for change in (
        {"exit_code": 3},
        {"outcome": CompletionOutcome.FAILED},
        {"callback_sequence": 2},
    ):
        s.do(dataclasses.replace(done, **change), "rejected:COMPLETION_CONFLICT")
    moved = dataclasses.replace(f["done"], expected_version=f["done"].expected_version + 1)
    s.do(dataclasses.replace(done, fence=moved), _NOT_LEASED)
    s.do(s.completion("lost", "lost-a1", W, f["lost"]), _NOT_LEASED)
    s.do(s.completion("claimed", "claimed-a1", W, f["claimed"]), "rejected:INVALID_TRANSITION")
    s.do(s.completion("running", "running-a1", W, f["running"]), "applied:completed")


_register_shared(
    "complete_with_lease",
    (
        "already-terminal-attempt-callback-sequence",
        "already-terminal-status-value",
        "already-terminal-attempt-exit-code",
        "completion-conflict-lease-status-completed",
        "completion-conflict-lease-version",
        "lease-not-leased-completed",
        "lease-not-leased-released",
        "invalid-transition",
    ),
    "replays",
    "LEASE-03",
    "complete_with_lease (T6r): the identical completion replay is already_terminal; the same "
    "fence with another exit code, outcome or callback sequence alone is COMPLETION_CONFLICT; "
    "the completed lease expected at its current version (not the completion's) is "
    "LEASE_NOT_LEASED, as is a lost Attempt's released lease; a leased claimed Attempt is "
    "INVALID_TRANSITION and the running Attempt's completion applies.",
    body=_cw_refusals,
)
no_trace(
    "complete_with_lease",
    ("callback-sequence-stale",),
    "unreachable",
    "a live Attempt's callback_sequence is 0 (only a completion, which finishes it, advances it "
    "for a remote Attempt) and a command's sequence is at least 1",
)


# -- admission (A-2..A-5, B-07; RETRY-02) ---------------------------------------------------------
def _ad_refusals(s: Scenario) -> None:
    admitted(s)
    admitted(s, expect="replayed:existing")
    s.admit("r1", NO_BACKOFF, attempt_id="r1-other", expect="rejected:RUN_ID_CONFLICT")
    invalid = PolicyDefinition(3, True, Safety.IDEMPOTENT, 2_000, 1_000)  # base above max
    s.admit("r2", invalid, expect="rejected:INVALID_RUN_RETRY_POLICY")
    unsafe = PolicyDefinition(3, True, Safety.UNKNOWN, 0, 0)
    s.admit("r2", unsafe, expect="rejected:RUN_RETRY_POLICY_UNSAFE")
    admitted(s, "r2")


_register_shared(
    "admit_run",
    ("existing", "run-id-conflict", "invalid-run-retry-policy", "run-retry-policy-unsafe"),
    "refusals",
    "RETRY-02",
    "admit_run: the same admission again is a replay (existing) and writes nothing; another "
    "admission for the taken Run id is refused RUN_ID_CONFLICT; a policy whose backoff base is "
    "above its maximum is refused INVALID_RUN_RETRY_POLICY and an enabled policy of unknown "
    "safety RUN_RETRY_POLICY_UNSAFE, before any row is written; the valid admission applies.",
    body=_ad_refusals,
)


def _cr_refusals(s: Scenario) -> None:
    create = CreateRun("c1", "project", "task", 1, LOCAL)
    s.do(create, "applied")
    s.do(create, "replayed:existing")
    s.do(dataclasses.replace(create, task_revision=2), "rejected:RUN_ID_CONFLICT")
    s.tick(1)
    s.do(FailOrphanedCreated("c1", s.now), "applied")
    s.do(create, "rejected:RUN_ID_CONFLICT")


_register_shared(
    "create_run",
    ("existing-same-identity", "existing-run-status", "run-id-conflict"),
    "refusals",
    "REC-12",
    "create_run (B-07): the same creation again is a replay (existing); another creation for the "
    "taken Run id is refused RUN_ID_CONFLICT; once the created Run failed (orphaned, B-30) the "
    "same creation is refused RUN_ID_CONFLICT too (the Run is no longer created).",
    body=_cr_refusals,
)


# -- the corpus and its coverage report -----------------------------------------------------------
def trace_name(command: str, name: str) -> str:
    builder = _BUILDERS[(command, name)]
    assert isinstance(builder, WriteBuilder)
    return f"{builder.spec}-write-{_slug(command)}-{builder.trace or name}"


def _build(name: str, builder: WriteBuilder, profile: Profile) -> Callable[[], Trace]:
    def build() -> Trace:
        s = Scenario(
            name, f"{builder.spec}: write boundary trace. {builder.description}", profile=profile
        )
        builder.body(s)
        return s.trace()

    return build


def scenarios() -> dict[str, Callable[[], Trace]]:
    """The write-boundary traces by name, for `model_tests.corpus.scenarios.SCENARIOS`."""
    out: dict[str, Callable[[], Trace]] = {}
    for command in WRITES:
        for b in enumerate_write_boundaries(command):
            builder = _BUILDERS.get((command, b.name))
            if isinstance(builder, WriteBuilder):
                name = trace_name(command, b.name)
                if name not in out:  # a shared trace is built once
                    out[name] = _build(name, builder, Profile.EDGE)
    return out


@dataclass(frozen=True, slots=True)
class WriteCoverage:
    """One write boundary's status: `covered` (by `detail`, a trace), `unreachable` or
    `shadowed` (with the reason), or `uncovered` (no trace: the test fails)."""

    boundary: WriteBoundary
    status: str
    detail: str


def coverage() -> dict[str, tuple[WriteCoverage, ...]]:
    """Per write command, every derived boundary and what covers it."""
    report: dict[str, tuple[WriteCoverage, ...]] = {}
    for command in WRITES:
        rows: list[WriteCoverage] = []
        for b in enumerate_write_boundaries(command):
            builder = _BUILDERS.get((command, b.name))
            if isinstance(builder, WriteBuilder):
                rows.append(WriteCoverage(b, "covered", trace_name(command, b.name)))
            elif isinstance(builder, NoTrace) and builder.status != "pending":
                rows.append(WriteCoverage(b, builder.status, builder.reason))
            else:
                pending = "pending: " if b.name in PENDING.get(command, ()) else ""
                rows.append(WriteCoverage(b, "uncovered", f"{pending}no trace for `{b.origin}`"))
        report[command] = tuple(rows)
    return report


def extra_builders() -> list[tuple[str, str]]:
    """Builders for boundaries the transitions no longer have (stale: the test reports them)."""
    derived = {(c, b.name) for c in WRITES for b in enumerate_write_boundaries(c)}
    return sorted(set(_BUILDERS) - derived)


def render(report: dict[str, tuple[WriteCoverage, ...]]) -> str:
    lines = []
    statuses = ("covered", "unreachable", "shadowed", "uncovered")
    for command, rows in report.items():
        counts = ", ".join(f"{sum(r.status == k for r in rows)} {k}" for k in statuses)
        lines.append(f"{command}: {len(rows)} boundaries, {counts}")
        for r in rows:
            lines.append(f"  {r.status:<11} {r.boundary.name:<40} {r.detail}")
    return "\n".join(lines)


#: Boundaries derived but not yet built (issue 16 item 1, left for a next pass): the report
#: shows them `uncovered`; the test fails on an uncovered boundary *not* listed here, and on an
#: entry here that is covered or no longer derived, so the list only shrinks.
PENDING: dict[str, tuple[str, ...]] = {}


def unlisted_gaps(report: dict[str, tuple[WriteCoverage, ...]]) -> list[str]:
    """Uncovered boundaries not in `PENDING` (a new refusal branch of the kernel) and `PENDING`
    entries that are no longer uncovered (built, or gone): both fail the test."""
    uncovered = {
        (command, r.boundary.name)
        for command, rows in report.items()
        for r in rows
        if r.status == "uncovered"
    }
    listed = {(command, name) for command, names in PENDING.items() for name in names}
    return [f"{c} {n} (uncovered)" for c, n in sorted(uncovered - listed)] + [
        f"{c} {n} (listed as pending but not uncovered)" for c, n in sorted(listed - uncovered)
    ]
