"""The boundary-generated Run corpus (issue 16, item 1): one small named trace per decision
boundary of every candidate source of the kernel's selection oracle (`kernel.selection`).

The boundaries are *derived*, not listed: `enumerate_boundaries` reads the oracle function of a
source and the eligibility predicates it calls (their source text, through `ast`) and turns

- every condition (an operand of an `and` / `or` chain, an `if` guard) into a term boundary:
  a Run that fails that term alone beside a control Run that passes everything (the exclusions
  Workflow Run, cancellation intent and non-runtime owner are named as such, and where the
  oracle has *no* such exclusion a `not-excluded-*` boundary pins that the source keeps it);
- every comparison with the observation time (`observed_at_ms`, `process_started_at_ms`) into
  the three instants equal / one ms before / one ms after;
- every column of the keyset key (the `Candidate` key tuples) into an `order-<column>`
  boundary (two candidates tied on every earlier column, ordered against the later ones) and,
  for sources that take a cursor, a `cursor-<column>` boundary (rows tied with the cursor up
  to that column, on both sides of it);
- the page size into `page-exactly-full`, `page-full-plus-one` and `page-empty` (P-1..P-3:
  `limit + 1` decides `has_more`).

Each boundary has a builder here that moves Runs to the needed states with real kernel
commands through the reference store and queries the source at the exact instant, checking the
expected page while recording (`model_tests.corpus.dsl`); the pages written into the trace are
the reference model's. A boundary the kernel's commands cannot reach (e.g. a legacy-owned Run
in `lost`: the kernel refuses to grant it a lease) is recorded as unreachable with the code
the kernel answers, computed when the report is made. A condition the oracle gains later that
no builder knows shows up as `uncovered` in `coverage()`, and tests/conformance/
test_boundary_corpus.py fails until it has a trace.

    .venv/bin/python -m model_tests.corpus.boundaries     # per source: boundary -> trace

The guarded writes (the transitions' refusal branches) are in the sibling module
`model_tests.corpus.write_boundaries`; `main` prints both reports.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from conformance.run.trace import Trace
from kernel import (
    ActivateLocal,
    Applied,
    Code,
    ConvergeCancel,
    CreateRun,
    GrantLease,
    LostRetryStep,
    NotRunningEvidence,
    PolicyDefinition,
    RecordLocalHandle,
    RecoverLocalStartup,
    RecoverRuntime,
    RequestCancel,
    Safety,
    apply,
    selection,
    token_digest,
)
from kernel.specs.states import Actor, CancelReason, Profile, RunKind, RunOwner
from kernel.transitions import run_cancellation, run_lost_retry, run_recovery
from model_tests.corpus import write_boundaries
from model_tests.corpus.dsl import LEASE_MS, Scenario, worker

NO_BACKOFF = PolicyDefinition(3, True, Safety.IDEMPOTENT, 0, 0)
BACKOFF = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 60_000)
LOCAL = "local"
CALLBACK = token_digest("boundary-callback".ljust(40, "c"))
LIMIT = 3  # the page-size boundaries use limit 3: full is 3 rows, full + 1 is 4

# -- derivation from the oracle -----------------------------------------------------------------
#: The oracle function of each source, and the profile its traces are recorded under (the
#: runtime recovery source is the cluster one, §2.3; the others are asked on edge).
ORACLES: dict[str, tuple[Callable[..., Any], Profile]] = {
    "lost_retry": (selection.lost_retry_candidates, Profile.EDGE),
    "runtime_recovery": (selection.runtime_recovery_candidates, Profile.CLUSTER),
    "lease_expiry": (selection.lease_expiry_candidates, Profile.EDGE),
    "local_startup": (selection.local_startup_candidates, Profile.EDGE),
    "orphaned_created": (selection.orphaned_created_candidates, Profile.EDGE),
    "cancel_convergence": (selection.cancel_convergence_candidates, Profile.EDGE),
    "local_dispatch": (selection.local_dispatch_candidates, Profile.EDGE),
}

#: Eligibility predicates an oracle calls, read as conditions of the source (each by name).
PREDICATES: dict[str, Callable[..., Any]] = {
    "is_lost_retry_eligible": run_lost_retry.is_lost_retry_eligible,
    "is_runtime_recovery_candidate": run_recovery.is_runtime_recovery_candidate,
    "is_local_startup_candidate": run_recovery.is_local_startup_candidate,
    "is_orphaned_created": run_recovery.is_orphaned_created,
    "has_no_live_execution": run_cancellation.has_no_live_execution,
    "is_pristine": run_recovery.is_pristine,
}
#: Predicates kept whole: one term each (their inside is one fact about the Run, E-1).
OPAQUE = {"has_revoked_remote_authority": "revoked-authority"}

#: The exclusions issue 16 names for every source, by the term that implements them.
UNIVERSAL = {"kind": "workflow", "owner": "non-runtime-owner", "cancel-intent": "cancel-intent"}
TIME_NAMES = ("observed_at_ms", "process_started_at_ms")


@dataclass(frozen=True, slots=True)
class Boundary:
    """One decision boundary of a source: `kind` is term, time, order, cursor or page;
    `origin` is the oracle text it was derived from."""

    source: str
    name: str
    kind: str
    origin: str


def _function_ast(function: Callable[..., Any]) -> ast.FunctionDef:
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    node = tree.body[0]
    assert isinstance(node, ast.FunctionDef)
    return node


def _atoms(node: ast.expr) -> Iterator[ast.expr]:
    """The operands of an `and` / `or` chain (recursively), `not` stripped."""
    if isinstance(node, ast.BoolOp):
        for value in node.values:
            yield from _atoms(value)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield from _atoms(node.operand)
    else:
        yield node


def _conditions(function: Callable[..., Any], seen: set[str]) -> Iterator[str]:
    """Every condition text of `function`: `if` guards, boolean returns and assignments of
    `and`/`or` chains, following calls into the eligibility predicates."""
    for node in ast.walk(_function_ast(function)):
        tests: list[ast.expr] = []
        if isinstance(node, ast.If):
            tests.append(node.test)
        elif isinstance(node, (ast.Return, ast.Assign)) and isinstance(
            node.value, (ast.BoolOp, ast.Compare)
        ):
            tests.append(node.value)
        for test in tests:
            for atom in _atoms(test):
                call = atom.func if isinstance(atom, ast.Call) else None
                name = call.id if isinstance(call, ast.Name) else None
                if name in PREDICATES and name not in seen:
                    seen.add(name)
                    yield from _conditions(PREDICATES[name], seen)
                elif name in PREDICATES:
                    continue
                else:
                    yield ast.unparse(atom)


def classify(condition: str) -> str:
    """The term a condition decides (the order of the checks matters: most specific first)."""
    rules = (
        ("revoked_remote_authority", "revoked-authority"),
        ("process_started_at_ms", "time"),
        ("observed_at_ms", "time"),
        ("due is None", "time"),
        ("owner", "owner"),
        (".kind", "kind"),
        ("cancel", "cancel-intent"),
        ("executor_type", "executor-type"),
        ("is_local", "local-executor"),
        ("pristine", "pristine"),
        ("leases_of", "pristine"),
        ("leased is None", "lease-state"),
        ("lease.status", "lease-state"),
        ("terminal", "terminal"),
        ("latest is None", "latest-attempt"),
        ("latest is not None", "latest-attempt"),
        ("latest.status", "attempt-status"),
        ("attempt.status", "attempt-status"),
        ("status", "run-status"),
    )
    for needle, term in rules:
        if needle in condition:
            return term
    if condition in {"claimed"}:
        return "attempt-status"  # the `claimed` flag of §1.9 is the dispatching+claimed term
    return f"unmapped:{condition}"


def _key_columns(function: Callable[..., Any]) -> tuple[str, ...]:
    """The keyset columns, read from every `Candidate(..., key)` the oracle builds: a column
    constant in every key is dropped, a constant that differs between keys is `class`, else the
    column is named by the last attribute of the (non-constant) expressions."""
    root = _function_ast(function)
    assigned: dict[str, list[ast.expr]] = {}
    for node in ast.walk(root):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            assigned.setdefault(node.targets[0].id, []).append(node.value)
    keys: list[ast.Tuple] = []
    for node in ast.walk(root):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Candidate":
            values = [node.args[2]]
            while values:
                value = values.pop()
                if isinstance(value, ast.Tuple):
                    keys.append(value)
                elif isinstance(value, ast.IfExp):
                    values += [value.body, value.orelse]
                elif isinstance(value, ast.Name):
                    values += assigned.get(value.id, [])
    assert keys, f"{function.__name__}: no Candidate key"
    columns: list[str] = []
    for column in zip(*(k.elts for k in keys), strict=True):
        constants = {ast.unparse(e) for e in column if isinstance(e, ast.Constant)}
        names = sorted(
            {ast.unparse(e).split(".")[-1] for e in column if not isinstance(e, ast.Constant)}
        )
        if not names:
            if len(constants) > 1:
                columns.append("class")
            continue
        columns.append("-or-".join(names))
    return tuple(columns)


def _takes_cursor(function: Callable[..., Any]) -> bool:
    return "after" in inspect.signature(function).parameters


def enumerate_boundaries(source: str) -> tuple[Boundary, ...]:
    """Every boundary of `source`, derived from its oracle (see the module docstring)."""
    function, _ = ORACLES[source]
    found: dict[str, Boundary] = {}

    def add(name: str, kind: str, origin: str) -> None:
        found.setdefault(name, Boundary(source, name, kind, origin))

    terms: dict[str, str] = {}
    for condition in _conditions(function, set()):
        term = classify(condition)
        # the origin shown for a time term is the comparison itself, not its null guard
        if term not in terms or (term == "time" and "due is None" in terms[term]):
            terms[term] = condition
    for term, origin in terms.items():
        if term == "time":
            for instant in ("equal", "one-ms-before", "one-ms-after"):
                add(f"time-{instant}", "time", origin)
        elif term in UNIVERSAL:
            # cancel convergence *requires* the intent: its boundary is the Run without one
            required = term == "cancel-intent" and "is not None" in origin
            prefix = "requires" if required else "exclude"
            add(f"{prefix}-{UNIVERSAL[term]}", "term", origin)
        else:
            add(term, "term", origin)
    for term, what in UNIVERSAL.items():
        if term not in terms:
            add(f"not-excluded-{what}", "term", "(no such condition in the oracle)")
    columns = _key_columns(function)
    for column in columns:
        add(f"order-{column}", "order", "key " + ", ".join(columns))
    if _takes_cursor(function):
        for column in columns:
            add(f"cursor-{column}", "cursor", "after: key " + ", ".join(columns))
    for edge in ("page-exactly-full", "page-full-plus-one", "page-empty"):
        add(edge, "page", "P-1..P-3: limit + 1 decides has_more")
    return tuple(found.values())


# -- builders ---------------------------------------------------------------------------------
Body = Callable[[Scenario], None]


@dataclass(frozen=True, slots=True)
class Builder:
    """The trace of one boundary: `body` records it; `spec` is the property it evidences."""

    spec: str
    description: str
    body: Body


@dataclass(frozen=True, slots=True)
class Unreachable:
    """A boundary no sequence of kernel commands reaches: `probe` returns the command the
    world would need and the aggregate it would apply to; the report shows the kernel's code."""

    reason: str
    probe: Callable[[Scenario], tuple[Any, str]]


BUILDERS: dict[tuple[str, str], Builder | Unreachable] = {}

#: The property each source's boundaries evidence (registered ids, kernel/specs/properties.py),
#: by boundary kind; `*` is the default of the source.
SPEC_OF: dict[str, dict[str, str]] = {
    "lost_retry": {"*": "RETRY-12", "time": "RETRY-07", "order": "RETRY-15", "page": "RETRY-13"},
    "runtime_recovery": {"*": "REC-01", "page": "REC-02"},
    "lease_expiry": {"*": "LEASE-07"},
    "local_startup": {"*": "REC-07"},
    "orphaned_created": {"*": "REC-12"},
    "cancel_convergence": {"*": "E-1"},
    "local_dispatch": {"*": "RETRY-18"},
}


def boundary(source: str, name: str, description: str) -> Callable[[Body], Body]:
    def register(body: Body) -> Body:
        kind = _kind_of(name)
        spec = SPEC_OF[source].get(kind, SPEC_OF[source]["*"])
        BUILDERS[(source, name)] = Builder(spec, description, body)
        return body

    return register


def unreachable(source: str, name: str, reason: str, probe: Callable[[Scenario], Any]) -> None:
    BUILDERS[(source, name)] = Unreachable(reason, probe)


def _kind_of(name: str) -> str:
    for kind in ("time", "order", "cursor", "page"):
        if name.startswith(kind):
            return kind
    return "term"


def trace_name(source: str, name: str) -> str:
    builder = BUILDERS[(source, name)]
    assert isinstance(builder, Builder)
    return f"{builder.spec}-boundary-{source.replace('_', '-')}-{name}"


# -- worlds: Runs moved by kernel commands ---------------------------------------------------------
W = worker()
W_LOCAL = worker("w-local", session="s-local", executor_types=(LOCAL,))


def lost(s: Scenario, run_id: str, *, kind: RunKind = RunKind.ORDINARY) -> str:
    """A remote Run lost at lease expiry now + LEASE_MS (edge), the clock left there."""
    aid = s.admit(run_id, BACKOFF, kind=kind)
    s.grant(run_id, aid, W)
    s.starting(run_id, aid, W)
    s.running(run_id, aid, W)
    s.tick(LEASE_MS)
    s.expire(run_id, aid, expect="applied:lost")
    return aid


def launched(s: Scenario, run_id: str, *, kind: RunKind = RunKind.ORDINARY) -> str:
    aid = s.admit(run_id, NO_BACKOFF, kind=kind)
    s.grant(run_id, aid, W)
    s.starting(run_id, aid, W)
    s.running(run_id, aid, W)
    return aid


def retry_wait(s: Scenario, run_id: str) -> int:
    """A lost Run scheduled for a retry with backoff; returns its due time."""
    lost(s, run_id)
    s.do(LostRetryStep(run_id, f"{run_id}-a2"), "applied:scheduled")
    policy = s.agg(run_id).policy
    assert policy is not None
    assert policy.next_attempt_at_ms is not None
    return policy.next_attempt_at_ms


def cancel(s: Scenario, run_id: str, expect: str = "applied") -> None:
    s.do(RequestCancel(run_id, CancelReason.USER, Actor.USER), expect)


def local_started(
    s: Scenario, run_id: str, *, kind: RunKind = RunKind.ORDINARY, handle: bool = True
) -> str:
    """A local Run activated (`starting`) and, with `handle`, running."""
    aid = s.admit(run_id, NO_BACKOFF, executor=LOCAL, kind=kind)
    s.do(ActivateLocal(run_id, aid, LOCAL, 1, CALLBACK), "applied")
    if handle:
        s.do(RecordLocalHandle(run_id, aid, f"pid:{run_id}", s.now), "applied")
    return aid


def created(s: Scenario, run_id: str, **kw: Any) -> None:
    s.do(CreateRun(run_id, "project", "task", 1, "shell", **kw), "applied")


def granted(s: Scenario, run_id: str, *, kind: RunKind = RunKind.ORDINARY) -> str:
    """A remote Run whose claimed Attempt holds a lease until now + LEASE_MS."""
    aid = s.admit(run_id, NO_BACKOFF, kind=kind)
    s.grant(run_id, aid, W)
    return aid


def _legacy_grant_probe(s: Scenario) -> tuple[Any, str]:
    s.admit("legacy", NO_BACKOFF, owner=RunOwner.LEGACY)
    return GrantLease("legacy", "legacy-a1", W, s.grant_token(), LEASE_MS), "legacy"


def _legacy_activate_probe(s: Scenario) -> tuple[Any, str]:
    s.admit("legacy", NO_BACKOFF, executor=LOCAL, owner=RunOwner.LEGACY)
    return ActivateLocal("legacy", "legacy-a1", LOCAL, 1, CALLBACK), "legacy"


def _page_edges(
    source: str,
    make: Callable[[Scenario, str], None],
    settle: Callable[[Scenario], None] = lambda s: None,
    **params: Any,
) -> None:
    """The three page-size boundaries of `source` with candidates made by `make` (in key
    order), queried after `settle` (e.g. the time at which every lease has expired)."""

    @boundary(
        source,
        "page-exactly-full",
        f"{source}: exactly `limit` candidates fill one "
        "page with has_more false (a runner reading `limit` rows, not `limit + 1`, or "
        "counting has_more from a full page, diverges).",
    )
    def full(s: Scenario) -> None:
        for rid in ("r1", "r2", "r3"):
            make(s, rid)
        settle(s)
        s.query(source, ["r1", "r2", "r3"], limit=LIMIT, **params)

    @boundary(
        source,
        "page-full-plus-one",
        f"{source}: `limit + 1` candidates give `limit` "
        "rows and has_more true; a page of limit 1 over them too.",
    )
    def plus_one(s: Scenario) -> None:
        for rid in ("r1", "r2", "r3", "r4"):
            make(s, rid)
        settle(s)
        s.query(source, ["r1", "r2", "r3"], limit=LIMIT, has_more=True, **params)
        s.query(source, ["r1"], limit=1, has_more=True, **params)

    @boundary(
        source,
        "page-empty",
        f"{source}: no candidate gives an empty page with "
        "has_more false, at limit 1 and at the maximum 64.",
    )
    def empty(s: Scenario) -> None:
        s.query(source, [], limit=1, **params)
        s.query(source, [], limit=64, **params)

    del full, plus_one, empty


# -- lost_retry (§1.8.2) --------------------------------------------------------------------------


@boundary(
    "lost_retry",
    "exclude-workflow",
    "lost_retry: a lost Workflow Run is never selected; the ordinary lost Run beside it is.",
)
def _lr_workflow(s: Scenario) -> None:
    lost(s, "wf", kind=RunKind.WORKFLOW)
    lost(s, "ordinary")
    s.query("lost_retry", ["ordinary"])


@boundary(
    "lost_retry",
    "exclude-cancel-intent",
    "lost_retry: a lost Run and a due retry_wait Run "
    "with a cancellation intent are never selected; the same Runs without one are.",
)
def _lr_cancel(s: Scenario) -> None:
    lost(s, "lost-intent")
    cancel(s, "lost-intent")
    lost(s, "lost-plain")
    due = retry_wait(s, "wait-intent")
    cancel(s, "wait-intent")
    retry_wait(s, "wait-plain")
    s.now = max(s.now, due) + 120_000
    s.query("lost_retry", ["lost-plain", "wait-plain"])


unreachable(
    "lost_retry",
    "exclude-non-runtime-owner",
    "a legacy-owned Run never reaches lost: the kernel refuses its lease grant",
    _legacy_grant_probe,
)


@boundary(
    "lost_retry",
    "run-status",
    "lost_retry: only lost and due retry_wait Runs are selected: a "
    "queued, running and succeeded Run beside them are not.",
)
def _lr_status(s: Scenario) -> None:
    s.admit("queued", NO_BACKOFF)
    launched(s, "running")
    aid = launched(s, "done")
    s.do(s.completion("done", aid, W, s.fence("done", aid, W)), "applied:completed")
    lost(s, "lost")
    s.query("lost_retry", ["lost"])


@boundary(
    "lost_retry",
    "attempt-status",
    "lost_retry: a Run requeued by a retry (queued, latest "
    "Attempt claimed, an earlier one lost) is no longer selected.",
)
def _lr_attempt(s: Scenario) -> None:
    lost(s, "requeued")
    s.do(LostRetryStep("requeued", "requeued-a2"), "applied:scheduled")
    s.tick(120_000)
    s.do(LostRetryStep("requeued", "requeued-a2"), "applied:requeued")
    lost(s, "lost")
    s.query("lost_retry", ["lost"])


@boundary(
    "lost_retry", "latest-attempt", "lost_retry: a created Run (no Attempt) is never selected."
)
def _lr_latest(s: Scenario) -> None:
    created(s, "created")
    lost(s, "lost")
    s.query("lost_retry", ["lost"])


def _due_world(s: Scenario) -> int:
    due = retry_wait(s, "wait")
    s.now = due
    return due


@boundary(
    "lost_retry",
    "time-equal",
    "lost_retry (RETRY-07): a retry_wait Run is selected at "
    "exactly its next_attempt_at_ms (due means `<=`).",
)
def _lr_equal(s: Scenario) -> None:
    _due_world(s)
    s.query("lost_retry", ["wait"])


@boundary(
    "lost_retry",
    "time-one-ms-before",
    "lost_retry (RETRY-07): one ms before its next_attempt_at_ms a retry_wait Run is not selected.",
)
def _lr_before(s: Scenario) -> None:
    due = _due_world(s)
    s.now = due - 1
    s.query("lost_retry", [])


@boundary(
    "lost_retry",
    "time-one-ms-after",
    "lost_retry (RETRY-07): one ms after its next_attempt_at_ms a retry_wait Run is selected.",
)
def _lr_after(s: Scenario) -> None:
    due = _due_world(s)
    s.now = due + 1
    s.query("lost_retry", ["wait"])


@boundary(
    "lost_retry",
    "order-class",
    "lost_retry (RETRY-15): a lost Run comes before a due "
    "retry_wait Run even when its finish time is later than the retry's due time and "
    "its run id sorts after it.",
)
def _lr_class(s: Scenario) -> None:
    retry_wait(s, "a-wait")
    s.tick(120_000)
    lost(s, "z-lost")
    s.query("lost_retry", ["z-lost", "a-wait"])


@boundary(
    "lost_retry",
    "order-due-or-finished",
    "lost_retry: lost Runs in finish-time order, not "
    "run-id order; due retry_wait Runs in due-time order, not run-id order.",
)
def _lr_time_order(s: Scenario) -> None:
    lost(s, "b-lost")
    s.tick(1)
    lost(s, "a-lost")
    retry_wait(s, "d-wait")
    s.tick(1)
    retry_wait(s, "c-wait")
    s.tick(120_000)
    s.query("lost_retry", ["b-lost", "a-lost", "d-wait", "c-wait"])


@boundary(
    "lost_retry",
    "order-run_id",
    "lost_retry: lost Runs that finished at the same instant come "
    "in run-id order, whatever order they were written in.",
)
def _lr_tie(s: Scenario) -> None:
    aids = {}
    for rid in ("b", "c", "a"):
        aids[rid] = launched(s, rid)
    s.tick(LEASE_MS)
    for rid in ("b", "c", "a"):
        s.expire(rid, aids[rid], expect="applied:lost")
    s.query("lost_retry", ["a", "b", "c"])


def _lr_make(s: Scenario, rid: str) -> None:
    lost(s, rid)


_page_edges("lost_retry", _lr_make)


# -- runtime_recovery (§2.3, cluster) -------------------------------------------------------------


def _expired_later(s: Scenario) -> None:
    s.tick(LEASE_MS)


@boundary(
    "runtime_recovery",
    "exclude-workflow",
    "runtime_recovery (REC-07): a Workflow Run whose lease "
    "expired while it ran is never selected; the ordinary one beside it is.",
)
def _rr_workflow(s: Scenario) -> None:
    launched(s, "wf", kind=RunKind.WORKFLOW)
    launched(s, "ordinary")
    s.tick(LEASE_MS)
    s.query("runtime_recovery", ["ordinary"])


unreachable(
    "runtime_recovery",
    "exclude-non-runtime-owner",
    "a legacy-owned Run never holds a started Attempt: the kernel refuses its lease grant",
    _legacy_grant_probe,
)


@boundary(
    "runtime_recovery",
    "run-status",
    "runtime_recovery: a succeeded Run and a queued Run are never "
    "selected, however old; the expired running Run is.",
)
def _rr_status(s: Scenario) -> None:
    aid = launched(s, "done")
    s.do(s.completion("done", aid, W, s.fence("done", aid, W)), "applied:completed")
    s.admit("queued", NO_BACKOFF)
    launched(s, "running")
    s.tick(LEASE_MS)
    s.query("runtime_recovery", ["running"])


@boundary(
    "runtime_recovery",
    "attempt-status",
    "runtime_recovery: a lost Run (recovered with not-running "
    "evidence: Run lost, latest Attempt lost) is no longer selected.",
)
def _rr_attempt(s: Scenario) -> None:
    aid = launched(s, "recovered")
    launched(s, "running")
    s.tick(LEASE_MS)
    s.query("runtime_recovery", ["recovered", "running"])
    s.do(run_recovery_command("recovered", aid), "applied:lost")
    s.query("runtime_recovery", ["running"])


def run_recovery_command(run_id: str, aid: str) -> RecoverRuntime:
    return RecoverRuntime(run_id, aid, NotRunningEvidence())


@boundary(
    "runtime_recovery",
    "latest-attempt",
    "runtime_recovery (REC-12): a created Run (no Attempt) is never selected, however old.",
)
def _rr_latest(s: Scenario) -> None:
    created(s, "created")
    launched(s, "running")
    s.tick(10 * LEASE_MS)
    s.query("runtime_recovery", ["running"])


@boundary(
    "runtime_recovery",
    "pristine",
    "runtime_recovery (REC-01): a pristine claimed Attempt (no lease "
    "ever) is never selected; a claimed Attempt whose lease expired before it started is.",
)
def _rr_pristine(s: Scenario) -> None:
    s.admit("pristine", NO_BACKOFF)
    granted(s, "granted")
    s.tick(LEASE_MS)
    s.query("runtime_recovery", ["granted"])


@boundary(
    "runtime_recovery",
    "lease-state",
    "runtime_recovery: a started Attempt with no leased lease (its "
    "lease released at expiry under an intent) is selected at any time, before a live one.",
)
def _rr_lease(s: Scenario) -> None:
    aid = launched(s, "released")
    cancel(s, "released")
    s.tick(LEASE_MS)
    s.expire("released", aid, expect="applied:released")
    launched(s, "live")
    s.query("runtime_recovery", ["released"])


def _rr_time(s: Scenario, offset: int, expect: list[str]) -> None:
    launched(s, "r")
    lease = s.agg("r").leased_lease("r-a1")
    assert lease is not None
    s.now = lease.expires_at_ms + offset
    s.query("runtime_recovery", expect)


@boundary(
    "runtime_recovery",
    "time-equal",
    "runtime_recovery: a lease is expired at exactly its "
    "expires_at_ms (`<=`): the Run is selected at that instant.",
)
def _rr_equal(s: Scenario) -> None:
    _rr_time(s, 0, ["r"])


@boundary(
    "runtime_recovery",
    "time-one-ms-before",
    "runtime_recovery: one ms before expires_at_ms the lease is live and the Run is not selected.",
)
def _rr_before(s: Scenario) -> None:
    _rr_time(s, -1, [])


@boundary(
    "runtime_recovery",
    "time-one-ms-after",
    "runtime_recovery: one ms after expires_at_ms the Run is selected.",
)
def _rr_after(s: Scenario) -> None:
    _rr_time(s, 1, ["r"])


@boundary(
    "runtime_recovery",
    "not-excluded-cancel-intent",
    "runtime_recovery: a cancellation intent does "
    "not keep an expired started Attempt out of the cluster source.",
)
def _rr_intent(s: Scenario) -> None:
    launched(s, "intent")
    cancel(s, "intent")
    launched(s, "plain")
    s.tick(LEASE_MS)
    s.query("runtime_recovery", ["intent", "plain"])


@boundary(
    "runtime_recovery",
    "order-class",
    "runtime_recovery: Attempts with no leased lease (nulls first) "
    "come before expired leases, whatever their attempt ids and expiry times.",
)
def _rr_class(s: Scenario) -> None:
    launched(s, "a-expired")
    s.tick(1)
    aid = launched(s, "z-released")
    cancel(s, "z-released")
    s.tick(LEASE_MS)
    s.expire("z-released", aid, expect="applied:released")
    s.query("runtime_recovery", ["z-released", "a-expired"])


@boundary(
    "runtime_recovery",
    "order-expires_at_ms",
    "runtime_recovery: expired leases in expiry order, not attempt-id order.",
)
def _rr_expires(s: Scenario) -> None:
    launched(s, "b")
    s.tick(1)
    launched(s, "a")
    s.tick(LEASE_MS)
    s.query("runtime_recovery", ["b", "a"])


@boundary(
    "runtime_recovery",
    "order-attempt_id",
    "runtime_recovery: leases that expire at the same instant "
    "come in attempt-id order, whatever order they were written in.",
)
def _rr_tie(s: Scenario) -> None:
    for rid in ("b", "c", "a"):
        launched(s, rid)
    s.tick(LEASE_MS)
    s.query("runtime_recovery", ["a", "b", "c"])


def _rr_make(s: Scenario, rid: str) -> None:
    launched(s, rid)
    s.tick(1)


_page_edges("runtime_recovery", _rr_make, _expired_later)


# -- lease_expiry (§3.16) -------------------------------------------------------------------------

unreachable(
    "lease_expiry",
    "exclude-non-runtime-owner",
    "a legacy-owned Run never holds a lease: the kernel refuses its lease grant",
    _legacy_grant_probe,
)


@boundary(
    "lease_expiry",
    "lease-state",
    "lease_expiry: a lease already released at expiry is never "
    "selected again; a leased one past its expiry is.",
)
def _le_state(s: Scenario) -> None:
    aid = granted(s, "released")
    granted(s, "leased")
    s.tick(LEASE_MS)
    s.query("lease_expiry", ["leased", "released"])
    s.expire("released", aid, expect="applied")
    s.query("lease_expiry", ["leased"])


def _le_time(s: Scenario, offset: int, expect: list[str]) -> None:
    """Also through a cursor: the paged query (`after`) has its own comparison."""
    granted(s, "a-early")
    s.tick(1)
    granted(s, "r")
    lease = s.agg("r").leased_lease("r-a1")
    assert lease is not None
    s.now = lease.expires_at_ms + offset
    s.query("lease_expiry", ["a-early", *expect])
    page = s.query("lease_expiry", ["a-early"], limit=1, has_more=bool(expect))
    s.query("lease_expiry", expect, limit=1, after=tuple(page["cursor"]))


@boundary(
    "lease_expiry",
    "time-equal",
    "lease_expiry: a lease is selected at exactly its expires_at_ms (`<=`).",
)
def _le_equal(s: Scenario) -> None:
    _le_time(s, 0, ["r"])


@boundary(
    "lease_expiry",
    "time-one-ms-before",
    "lease_expiry: one ms before expires_at_ms the lease is not selected.",
)
def _le_before(s: Scenario) -> None:
    _le_time(s, -1, [])


@boundary(
    "lease_expiry",
    "time-one-ms-after",
    "lease_expiry: one ms after expires_at_ms the lease is selected.",
)
def _le_after(s: Scenario) -> None:
    _le_time(s, 1, ["r"])


@boundary(
    "lease_expiry",
    "not-excluded-workflow",
    "lease_expiry: the expiry source keeps the expired "
    "lease of a Workflow Run (it has no kind condition).",
)
def _le_workflow(s: Scenario) -> None:
    granted(s, "wf", kind=RunKind.WORKFLOW)
    granted(s, "ordinary")
    s.tick(LEASE_MS)
    s.query("lease_expiry", ["ordinary", "wf"])


@boundary(
    "lease_expiry",
    "not-excluded-cancel-intent",
    "lease_expiry: a cancellation intent does not keep an expired lease out of the expiry source.",
)
def _le_intent(s: Scenario) -> None:
    granted(s, "intent")
    cancel(s, "intent")
    granted(s, "plain")
    s.tick(LEASE_MS)
    s.query("lease_expiry", ["intent", "plain"])


@boundary(
    "lease_expiry",
    "order-expires_at_ms",
    "lease_expiry: leases in expiry order, not attempt-id order.",
)
def _le_expires(s: Scenario) -> None:
    granted(s, "b")
    s.tick(1)
    granted(s, "a")
    s.tick(LEASE_MS)
    s.query("lease_expiry", ["b", "a"])


@boundary(
    "lease_expiry",
    "order-attempt_id",
    "lease_expiry: leases expiring at the same instant come in attempt-id order.",
)
def _le_tie(s: Scenario) -> None:
    for rid in ("b", "c", "a"):
        granted(s, rid)
    s.tick(LEASE_MS)
    s.query("lease_expiry", ["a", "b", "c"])


@boundary(
    "lease_expiry",
    "cursor-expires_at_ms",
    "lease_expiry: after the cursor (E, m) come (E, z) "
    "and (E + 1, a) but not (E - 1, y): the keyset compares the key as a row, not "
    "column by column.",
)
def _le_cursor_expires(s: Scenario) -> None:
    granted(s, "y")
    s.tick(1)
    granted(s, "m")
    granted(s, "z")
    s.tick(1)
    granted(s, "a")
    s.tick(LEASE_MS)
    page = s.query("lease_expiry", ["y", "m"], limit=2, has_more=True)
    s.query("lease_expiry", ["z", "a"], limit=2, after=tuple(page["cursor"]))


@boundary(
    "lease_expiry",
    "cursor-attempt_id",
    "lease_expiry: with every expiry equal, the cursor at m "
    "returns z only (strictly after, ties broken by attempt id).",
)
def _le_cursor_tie(s: Scenario) -> None:
    for rid in ("z", "a", "m"):
        granted(s, rid)
    s.tick(LEASE_MS)
    page = s.query("lease_expiry", ["a", "m"], limit=2, has_more=True)
    s.query("lease_expiry", ["z"], limit=2, after=tuple(page["cursor"]))


def _le_make(s: Scenario, rid: str) -> None:
    granted(s, rid)
    s.tick(1)


_page_edges("lease_expiry", _le_make, _expired_later, after=None)


# -- local_startup (§2.2) -------------------------------------------------------------------------


@boundary(
    "local_startup",
    "exclude-workflow",
    "local_startup (REC-07): a Workflow Run with a running "
    "local Attempt is never selected; the ordinary one is.",
)
def _ls_workflow(s: Scenario) -> None:
    local_started(s, "wf", kind=RunKind.WORKFLOW)
    local_started(s, "ordinary")
    s.query("local_startup", ["ordinary"])


unreachable(
    "local_startup",
    "exclude-non-runtime-owner",
    "a legacy-owned Run never starts locally: the kernel refuses its activation",
    _legacy_activate_probe,
)


@boundary(
    "local_startup",
    "run-status",
    "local_startup: a queued local Run (not activated) is not "
    "selected; a dispatching (starting) and a running one are.",
)
def _ls_status(s: Scenario) -> None:
    s.admit("queued", NO_BACKOFF, executor=LOCAL)
    local_started(s, "starting", handle=False)
    local_started(s, "running")
    s.query("local_startup", ["running", "starting"])


@boundary(
    "local_startup",
    "attempt-status",
    "local_startup: after recovery wrote lost, the Run is no longer selected.",
)
def _ls_attempt(s: Scenario) -> None:
    aid = local_started(s, "recovered")
    local_started(s, "running")
    s.reopen()
    s.query("local_startup", ["recovered", "running"])
    s.do(RecoverLocalStartup("recovered", aid, NotRunningEvidence()), "applied:lost")
    s.query("local_startup", ["running"])


@boundary(
    "local_startup", "latest-attempt", "local_startup: a created Run (no Attempt) is not selected."
)
def _ls_latest(s: Scenario) -> None:
    created(s, "created")
    local_started(s, "running")
    s.query("local_startup", ["running"])


@boundary(
    "local_startup",
    "local-executor",
    "local_startup: a started remote Attempt (a Worker's) is not selected; the local one is.",
)
def _ls_local(s: Scenario) -> None:
    launched(s, "remote")
    local_started(s, "local")
    s.query("local_startup", ["local"])


@boundary(
    "local_startup",
    "not-excluded-cancel-intent",
    "local_startup: a running local Run with a "
    "cancellation intent is still selected (recovery resolves it first).",
)
def _ls_intent(s: Scenario) -> None:
    local_started(s, "intent")
    cancel(s, "intent")
    local_started(s, "plain")
    s.query("local_startup", ["intent", "plain"])


@boundary(
    "local_startup",
    "order-attempt_id",
    "local_startup: candidates in attempt-id order, whatever order they were written in.",
)
def _ls_order(s: Scenario) -> None:
    for rid in ("b", "c", "a"):
        local_started(s, rid)
    s.query("local_startup", ["a", "b", "c"])


@boundary(
    "local_startup",
    "cursor-attempt_id",
    "local_startup: the cursor at m returns z only (strictly after the cursor).",
)
def _ls_cursor(s: Scenario) -> None:
    for rid in ("z", "a", "m"):
        local_started(s, rid)
    page = s.query("local_startup", ["a", "m"], limit=2, has_more=True)
    s.query("local_startup", ["z"], limit=2, after=tuple(page["cursor"]))


def _ls_make(s: Scenario, rid: str) -> None:
    local_started(s, rid)


_page_edges("local_startup", _ls_make, after=None)


# -- orphaned_created (§2.2, B-30) ----------------------------------------------------------------
LATER = 10**9  # a process start after every creation of these traces


@boundary(
    "orphaned_created",
    "run-status",
    "orphaned_created: a queued (admitted) Run is not selected; the created one is.",
)
def _oc_status(s: Scenario) -> None:
    s.admit("queued", NO_BACKOFF)
    created(s, "created")
    s.tick(1)
    s.query("orphaned_created", ["created"], process_started_at_ms=s.now)


@boundary(
    "orphaned_created",
    "exclude-non-runtime-owner",
    "orphaned_created: a legacy-owned created Run "
    "is never failed by startup; the runtime one is selected.",
)
def _oc_owner(s: Scenario) -> None:
    created(s, "legacy", owner=RunOwner.LEGACY)
    created(s, "runtime")
    s.tick(1)
    s.query("orphaned_created", ["runtime"], process_started_at_ms=s.now)


@boundary(
    "orphaned_created",
    "exclude-workflow",
    "orphaned_created (REC-07): a created Workflow Run is not "
    "selected by ordinary startup recovery.",
)
def _oc_workflow(s: Scenario) -> None:
    created(s, "wf", kind=RunKind.WORKFLOW)
    created(s, "ordinary")
    s.tick(1)
    s.query("orphaned_created", ["ordinary"], process_started_at_ms=s.now)


@boundary(
    "orphaned_created",
    "time-equal",
    "orphaned_created: a Run created at exactly the process start is "
    "not orphaned (`created_at_ms < process_started_at_ms`).",
)
def _oc_equal(s: Scenario) -> None:
    _oc_time(s, 0, [])


def _oc_time(s: Scenario, offset: int, expect: list[str]) -> None:
    """`r` created at T, the process started at T + offset; also through a cursor (the paged
    query has its own comparison)."""
    created(s, "a-early")
    s.tick(2)  # still before a process start one ms before `r`
    created(s, "r")
    started = s.now + offset
    s.query("orphaned_created", ["a-early", *expect], process_started_at_ms=started)
    page = s.query(
        "orphaned_created",
        ["a-early"],
        limit=1,
        has_more=bool(expect),
        process_started_at_ms=started,
    )
    s.query(
        "orphaned_created",
        expect,
        limit=1,
        after=tuple(page["cursor"]),
        process_started_at_ms=started,
    )


@boundary(
    "orphaned_created",
    "time-one-ms-before",
    "orphaned_created: a process that started one ms "
    "before the Run was created does not select it.",
)
def _oc_before(s: Scenario) -> None:
    _oc_time(s, -1, [])


@boundary(
    "orphaned_created",
    "time-one-ms-after",
    "orphaned_created: a process that started one ms after the Run was created selects it.",
)
def _oc_after(s: Scenario) -> None:
    _oc_time(s, 1, ["r"])


@boundary(
    "orphaned_created",
    "not-excluded-cancel-intent",
    "orphaned_created: a created Run with a "
    "cancellation intent is still selected (it has no execution to wait for).",
)
def _oc_intent(s: Scenario) -> None:
    created(s, "intent")
    cancel(s, "intent")
    created(s, "plain")
    s.tick(1)
    s.query("orphaned_created", ["intent", "plain"], process_started_at_ms=s.now)


@boundary(
    "orphaned_created",
    "order-created_at_ms",
    "orphaned_created: candidates in creation order, not run-id order.",
)
def _oc_created(s: Scenario) -> None:
    created(s, "b")
    s.tick(1)
    created(s, "a")
    s.query("orphaned_created", ["b", "a"], process_started_at_ms=LATER)


@boundary(
    "orphaned_created",
    "order-run_id",
    "orphaned_created: Runs created at the same instant come in run-id order.",
)
def _oc_tie(s: Scenario) -> None:
    for rid in ("b", "c", "a"):
        created(s, rid)
    s.query("orphaned_created", ["a", "b", "c"], process_started_at_ms=LATER)


@boundary(
    "orphaned_created",
    "cursor-created_at_ms",
    "orphaned_created: after the cursor (T, m) come (T, z) "
    "and (T + 1, a) but not (T - 1, y): the keyset compares the key as a row.",
)
def _oc_cursor_created(s: Scenario) -> None:
    created(s, "y")
    s.tick(1)
    created(s, "m")
    created(s, "z")
    s.tick(1)
    created(s, "a")
    page = s.query(
        "orphaned_created", ["y", "m"], limit=2, has_more=True, process_started_at_ms=LATER
    )
    s.query(
        "orphaned_created",
        ["z", "a"],
        limit=2,
        after=tuple(page["cursor"]),
        process_started_at_ms=LATER,
    )


@boundary(
    "orphaned_created",
    "cursor-run_id",
    "orphaned_created: with every creation time equal, the cursor at m returns z only.",
)
def _oc_cursor_tie(s: Scenario) -> None:
    for rid in ("z", "a", "m"):
        created(s, rid)
    page = s.query(
        "orphaned_created", ["a", "m"], limit=2, has_more=True, process_started_at_ms=LATER
    )
    s.query(
        "orphaned_created", ["z"], limit=2, after=tuple(page["cursor"]), process_started_at_ms=LATER
    )


def _oc_make(s: Scenario, rid: str) -> None:
    created(s, rid)
    s.tick(1)


_page_edges("orphaned_created", _oc_make, after=None, process_started_at_ms=LATER)


# -- cancel_convergence (§1.9, E-1) ---------------------------------------------------------------


def queued_with_intent(s: Scenario, rid: str, **kw: Any) -> None:
    s.admit(rid, NO_BACKOFF, **kw)
    cancel(s, rid)


@boundary(
    "cancel_convergence",
    "exclude-non-runtime-owner",
    "cancel_convergence: a legacy-owned queued Run "
    "with an intent is never converged by the runtime; the runtime one is selected.",
)
def _cc_owner(s: Scenario) -> None:
    queued_with_intent(s, "legacy", owner=RunOwner.LEGACY)
    queued_with_intent(s, "runtime")
    s.query("cancel_convergence", ["runtime"])


@boundary(
    "cancel_convergence",
    "exclude-workflow",
    "cancel_convergence: a Workflow Run with an intent is not selected; the ordinary one is.",
)
def _cc_workflow(s: Scenario) -> None:
    queued_with_intent(s, "wf", kind=RunKind.WORKFLOW)
    queued_with_intent(s, "ordinary")
    s.query("cancel_convergence", ["ordinary"])


@boundary(
    "cancel_convergence",
    "requires-cancel-intent",
    "cancel_convergence: a queued Run without an intent is not selected; with one it is.",
)
def _cc_intent(s: Scenario) -> None:
    s.admit("plain", NO_BACKOFF)
    queued_with_intent(s, "intent")
    s.query("cancel_convergence", ["intent"])


@boundary(
    "cancel_convergence",
    "terminal",
    "cancel_convergence: once converged (cancelled, terminal) a Run is no longer selected.",
)
def _cc_terminal(s: Scenario) -> None:
    queued_with_intent(s, "done")
    queued_with_intent(s, "open")
    s.query("cancel_convergence", ["done", "open"])
    s.do(ConvergeCancel("done"), "applied")
    s.query("cancel_convergence", ["open"])


@boundary(
    "cancel_convergence",
    "run-status",
    "cancel_convergence: created, queued, lost and retry_wait Runs "
    "with an intent are selected; a running one is not (it has a live execution).",
)
def _cc_status(s: Scenario) -> None:
    created(s, "created")
    s.admit("queued", NO_BACKOFF)
    lost(s, "lost")
    retry_wait(s, "wait")
    launched(s, "running")
    for rid in ("created", "queued", "lost", "wait", "running"):
        cancel(s, rid)
        s.tick(1)
    s.query("cancel_convergence", ["created", "queued", "lost", "wait"])


@boundary(
    "cancel_convergence",
    "latest-attempt",
    "cancel_convergence: a created Run (no Attempt) with an intent is selected.",
)
def _cc_latest(s: Scenario) -> None:
    created(s, "created")
    cancel(s, "created")
    s.query("cancel_convergence", ["created"])


@boundary(
    "cancel_convergence",
    "attempt-status",
    "cancel_convergence: a dispatching Run whose Attempt is "
    "still claimed (leased, not started) is selected; one whose Attempt is starting is "
    "not.",
)
def _cc_attempt(s: Scenario) -> None:
    granted(s, "claimed")
    aid = granted(s, "starting")
    s.starting("starting", aid, W)
    cancel(s, "claimed")
    cancel(s, "starting")
    s.query("cancel_convergence", ["claimed"])


@boundary(
    "cancel_convergence",
    "revoked-authority",
    "cancel_convergence (E-1): a running remote Attempt whose "
    "lease expiry released it under an intent is selected; a live one is not.",
)
def _cc_revoked(s: Scenario) -> None:
    aid = launched(s, "revoked")
    cancel(s, "revoked")
    s.query("cancel_convergence", [])
    s.tick(LEASE_MS)
    s.expire("revoked", aid, expect="applied:released")
    launched(s, "live")
    cancel(s, "live")
    s.query("cancel_convergence", ["revoked"])


@boundary(
    "cancel_convergence",
    "order-cancel_requested_at_ms",
    "cancel_convergence: candidates in the order their intents were requested, not run-id order.",
)
def _cc_order(s: Scenario) -> None:
    s.admit("b", NO_BACKOFF)
    s.admit("a", NO_BACKOFF)
    cancel(s, "b")
    s.tick(1)
    cancel(s, "a")
    s.query("cancel_convergence", ["b", "a"])


@boundary(
    "cancel_convergence",
    "order-run_id",
    "cancel_convergence: intents requested at the same instant come in run-id order.",
)
def _cc_tie(s: Scenario) -> None:
    for rid in ("b", "c", "a"):
        queued_with_intent(s, rid)
    s.query("cancel_convergence", ["a", "b", "c"])


def _cc_make(s: Scenario, rid: str) -> None:
    queued_with_intent(s, rid)
    s.tick(1)


_page_edges("cancel_convergence", _cc_make)


# -- local_dispatch (§1.8.3) ----------------------------------------------------------------------
DISPATCH: dict[str, Any] = {"local_executor_type": LOCAL}


def queued_local(s: Scenario, rid: str, **kw: Any) -> str:
    return s.admit(rid, NO_BACKOFF, executor=LOCAL, **kw)


@boundary(
    "local_dispatch",
    "exclude-non-runtime-owner",
    "local_dispatch: a legacy-owned queued local Run "
    "is never dispatched; the runtime one is selected.",
)
def _ld_owner(s: Scenario) -> None:
    queued_local(s, "legacy", owner=RunOwner.LEGACY)
    queued_local(s, "runtime")
    s.query("local_dispatch", ["runtime"], **DISPATCH)


@boundary(
    "local_dispatch",
    "run-status",
    "local_dispatch: a dispatching Run whose claimed Attempt is "
    "leased is not selected; after its lease expires (queued again) it is.",
)
def _ld_status(s: Scenario) -> None:
    aid = queued_local(s, "leased")
    s.grant("leased", aid, W_LOCAL)
    queued_local(s, "queued")
    s.query("local_dispatch", ["queued"], **DISPATCH)
    s.tick(LEASE_MS)
    s.expire("leased", aid, expect="applied")
    s.query("local_dispatch", ["queued", "leased"], **DISPATCH)


@boundary(
    "local_dispatch",
    "exclude-cancel-intent",
    "local_dispatch (RETRY-18): a queued local Run with a cancellation intent is not selected.",
)
def _ld_intent(s: Scenario) -> None:
    queued_local(s, "intent")
    cancel(s, "intent")
    queued_local(s, "plain")
    s.query("local_dispatch", ["plain"], **DISPATCH)


@boundary(
    "local_dispatch",
    "latest-attempt",
    "local_dispatch: a created Run (no Attempt) is not selected.",
)
def _ld_latest(s: Scenario) -> None:
    s.do(CreateRun("created", "project", "task", 1, LOCAL), "applied")
    queued_local(s, "queued")
    s.query("local_dispatch", ["queued"], **DISPATCH)


@boundary(
    "local_dispatch",
    "attempt-status",
    "local_dispatch: an activated local Run (Attempt starting) is no longer selected.",
)
def _ld_attempt(s: Scenario) -> None:
    aid = queued_local(s, "activated")
    queued_local(s, "queued")
    s.query("local_dispatch", ["activated", "queued"], **DISPATCH)
    s.do(ActivateLocal("activated", aid, LOCAL, 1, CALLBACK), "applied")
    s.query("local_dispatch", ["queued"], **DISPATCH)


@boundary(
    "local_dispatch",
    "executor-type",
    "local_dispatch: a queued Run of another executor type is not "
    "selected; asked for that type, only it is.",
)
def _ld_executor(s: Scenario) -> None:
    s.admit("shell", NO_BACKOFF)
    queued_local(s, "local")
    s.query("local_dispatch", ["local"], **DISPATCH)
    s.query("local_dispatch", ["shell"], local_executor_type="shell")


@boundary(
    "local_dispatch",
    "not-excluded-workflow",
    "local_dispatch: a queued local Workflow Run is "
    "dispatched like an ordinary one (the source has no kind condition).",
)
def _ld_workflow(s: Scenario) -> None:
    queued_local(s, "wf", kind=RunKind.WORKFLOW)
    queued_local(s, "ordinary")
    s.query("local_dispatch", ["ordinary", "wf"], **DISPATCH)


@boundary(
    "local_dispatch",
    "order-queued",
    "local_dispatch: candidates in queued-time order, not attempt-id order.",
)
def _ld_queued(s: Scenario) -> None:
    queued_local(s, "b")
    s.tick(1)
    queued_local(s, "a")
    s.query("local_dispatch", ["b", "a"], **DISPATCH)


def _requeued_by_expiry(s: Scenario, rid: str) -> str:
    """A local Run granted to a Worker and queued again at lease expiry (LEASE-06): its queued
    time is the expiry, its Attempt's creation time the admission."""
    aid = queued_local(s, rid)
    s.grant(rid, aid, W_LOCAL)
    return aid


@boundary(
    "local_dispatch",
    "order-created_at_ms",
    "local_dispatch: with equal queued times, the Attempt "
    "created earlier comes first, not the smaller attempt id (a Run queued again at "
    "lease expiry keeps its older claimed Attempt).",
)
def _ld_created(s: Scenario) -> None:
    aid = _requeued_by_expiry(s, "z")
    s.tick(LEASE_MS)
    s.expire("z", aid, expect="applied")
    queued_local(s, "a")
    s.query("local_dispatch", ["z", "a"], **DISPATCH)


@boundary(
    "local_dispatch",
    "order-attempt_id",
    "local_dispatch: Runs queued at the same instant come in attempt-id order.",
)
def _ld_tie(s: Scenario) -> None:
    for rid in ("b", "c", "a"):
        queued_local(s, rid)
    s.query("local_dispatch", ["a", "b", "c"], **DISPATCH)


@boundary(
    "local_dispatch",
    "cursor-queued",
    "local_dispatch: after the cursor at m (queued T) come z (T) and a (T + 1) but not y (T - 1).",
)
def _ld_cursor_queued(s: Scenario) -> None:
    queued_local(s, "y")
    s.tick(1)
    queued_local(s, "m")
    queued_local(s, "z")
    s.tick(1)
    queued_local(s, "a")
    page = s.query("local_dispatch", ["y", "m"], limit=2, has_more=True, **DISPATCH)
    s.query("local_dispatch", ["z", "a"], limit=2, after=tuple(page["cursor"]), **DISPATCH)


@boundary(
    "local_dispatch",
    "cursor-created_at_ms",
    "local_dispatch: three Runs queued at the same instant "
    "with Attempts created at T0, T0 + 1 and later: after the cursor at the second (mm), "
    "the third (aa, smaller attempt id, later Attempt) comes and the first (zz) does not.",
)
def _ld_cursor_created(s: Scenario) -> None:
    zz = _requeued_by_expiry(s, "zz")
    s.tick(1)
    mm = _requeued_by_expiry(s, "mm")
    s.tick(LEASE_MS)
    s.expire("zz", zz, expect="applied")
    s.expire("mm", mm, expect="applied")
    queued_local(s, "aa")
    page = s.query("local_dispatch", ["zz", "mm"], limit=2, has_more=True, **DISPATCH)
    s.query("local_dispatch", ["aa"], limit=2, after=tuple(page["cursor"]), **DISPATCH)


@boundary(
    "local_dispatch",
    "cursor-attempt_id",
    "local_dispatch: with every time equal, the cursor at m returns z only.",
)
def _ld_cursor_tie(s: Scenario) -> None:
    for rid in ("z", "a", "m"):
        queued_local(s, rid)
    page = s.query("local_dispatch", ["a", "m"], limit=2, has_more=True, **DISPATCH)
    s.query("local_dispatch", ["z"], limit=2, after=tuple(page["cursor"]), **DISPATCH)


def _ld_make(s: Scenario, rid: str) -> None:
    queued_local(s, rid)
    s.tick(1)


_page_edges("local_dispatch", _ld_make, after=None, **DISPATCH)


# -- the corpus and its coverage report -----------------------------------------------------------
def scenarios() -> dict[str, Callable[[], Trace]]:
    """The boundary traces by name, for `model_tests.corpus.scenarios.SCENARIOS`."""
    out: dict[str, Callable[[], Trace]] = {}
    for source, (_, profile) in ORACLES.items():
        for b in enumerate_boundaries(source):
            builder = BUILDERS.get((source, b.name))
            if not isinstance(builder, Builder):
                continue
            name = trace_name(source, b.name)
            out[name] = _build(name, builder, profile)
    return out


def _build(name: str, builder: Builder, profile: Profile) -> Callable[[], Trace]:
    def build() -> Trace:
        s = Scenario(
            name, f"{builder.spec}: boundary trace. {builder.description}", profile=profile
        )
        builder.body(s)
        return s.trace()

    return build


@dataclass(frozen=True, slots=True)
class Coverage:
    """One boundary's status: `covered` (by `trace`), `unreachable` (with the kernel's answer)
    or `uncovered` (no builder: a gap the test reports)."""

    boundary: Boundary
    status: str
    detail: str


def coverage() -> dict[str, tuple[Coverage, ...]]:
    """Per source, every derived boundary and what covers it."""
    report: dict[str, tuple[Coverage, ...]] = {}
    for source, (_, profile) in ORACLES.items():
        rows: list[Coverage] = []
        for b in enumerate_boundaries(source):
            builder = BUILDERS.get((source, b.name))
            if isinstance(builder, Builder):
                rows.append(Coverage(b, "covered", trace_name(source, b.name)))
            elif isinstance(builder, Unreachable):
                s = Scenario(f"probe-{source}-{b.name}", "probe", profile=profile)
                command, run_id = builder.probe(s)
                outcome = apply(s.agg(run_id), command, s.now)
                code = outcome.code.value if isinstance(outcome.code, Code) else outcome.code
                if isinstance(outcome, Applied):
                    rows.append(Coverage(b, "uncovered", f"reachable now: {command.name} applies"))
                else:
                    rows.append(Coverage(b, "unreachable", f"{builder.reason} ({code})"))
            else:
                rows.append(Coverage(b, "uncovered", f"no trace for `{b.origin}`"))
        report[source] = tuple(rows)
    return report


def extra_builders() -> list[tuple[str, str]]:
    """Builders for boundaries the oracle no longer has (stale: the test reports them)."""
    derived = {(src, b.name) for src in ORACLES for b in enumerate_boundaries(src)}
    return sorted(set(BUILDERS) - derived)


def render(report: dict[str, tuple[Coverage, ...]]) -> str:
    lines = []
    for source, rows in report.items():
        counts = {
            k: sum(r.status == k for r in rows) for k in ("covered", "unreachable", "uncovered")
        }
        lines.append(
            f"{source}: {len(rows)} boundaries, {counts['covered']} covered, "
            f"{counts['unreachable']} unreachable, {counts['uncovered']} uncovered"
        )
        for r in rows:
            lines.append(f"  {r.status:<11} {r.boundary.name:<28} {r.detail}")
    return "\n".join(lines)


def main() -> int:
    report = coverage()
    print(render(report))
    stale = extra_builders()
    for source, name in stale:
        print(f"stale builder (the oracle has no such boundary): {source} {name}")
    uncovered = [r for rows in report.values() for r in rows if r.status == "uncovered"]
    writes = write_boundaries.coverage()
    print(write_boundaries.render(writes))
    write_stale = write_boundaries.extra_builders()
    for command, name in write_stale:
        print(f"stale builder (the transition has no such boundary): {command} {name}")
    gaps = write_boundaries.unlisted_gaps(writes)
    for gap in gaps:
        print(f"uncovered and not listed as pending: {gap}")
    return 1 if uncovered or stale or write_stale or gaps else 0


if __name__ == "__main__":
    sys.exit(main())
