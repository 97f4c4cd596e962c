"""The canonical projection of durable Run-domain state (SPEC §7).

Every store projects to the same JSON-compatible value: the rows of §1.1 as plain dicts, sorted
by primary key, enums as their values, tokens only as digests (they are never stored raw). A
field-level diff of two projections is what the conformance report shows.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from kernel import Attempt, Event, Lease, Run, RunAggregate, RunRetryPolicy
from kernel.approved_action import ActionEvent, ApprovedAction, action_event_row, action_row
from kernel.workflow import StepRun, TaskAdmission, WorkflowAdmission, WorkflowAggregate

Projection = dict[str, list[dict[str, Any]]]
#: The Workflow tables (SPEC §4.1) are in a projection only when they hold a row, so the
#: projection of a store without Workflows is the Run domain's five tables alone.
WORKFLOW_TABLES = ("workflow_admissions", "step_runs", "task_admissions")
#: The approval domain's tables (SPEC §5, issue 19), likewise only when they hold a row; their
#: rows are `kernel.approved_action.codec`'s, the edge tables' columns (the backdoor reader's).
ACTION_TABLES = ("approved_actions", "action_events")
TABLES = ("runs", "attempts", "policies", "leases", "events", *WORKFLOW_TABLES, *ACTION_TABLES)


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _row(
    value: Run
    | Attempt
    | RunRetryPolicy
    | Lease
    | Event
    | WorkflowAdmission
    | StepRun
    | TaskAdmission,
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    cls: type = type(value)
    for name in _field_names(cls):
        item = getattr(value, name)
        if isinstance(item, enum.Enum):
            item = item.value
        elif name == "payload":
            item = {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in item}
        elif name == "depends_on":
            item = list(item)
        out[name] = item
    return out


def project(
    aggregates: Iterable[RunAggregate],
    events: Mapping[str, Iterable[Event]],
    workflows: Iterable[WorkflowAggregate] = (),
    *,
    actions: Iterable[ApprovedAction] = (),
    action_events: Iterable[ActionEvent] = (),
) -> Projection:
    """Project aggregates and their Events (keyed by run id), the Workflow rows of
    `workflows`, and the approval domain's `actions` and `action_events`, canonically."""
    runs: list[dict[str, Any]] = []
    attempts: list[dict[str, Any]] = []
    policies: list[dict[str, Any]] = []
    leases: list[dict[str, Any]] = []
    all_events: list[dict[str, Any]] = []
    for agg in aggregates:
        runs.append(_row(agg.run))
        attempts.extend(_row(a) for a in agg.attempts)
        if agg.policy is not None:
            policies.append(_row(agg.policy))
        leases.extend(_row(x) for x in agg.leases)
        all_events.extend(_row(e) for e in events.get(agg.run.run_id, ()))
    out: Projection = {
        "runs": sorted(runs, key=lambda r: r["run_id"]),
        "attempts": sorted(attempts, key=lambda r: r["attempt_id"]),
        "policies": sorted(policies, key=lambda r: r["run_id"]),
        "leases": sorted(leases, key=lambda r: (r["attempt_id"], r["lease_generation"])),
        "events": sorted(all_events, key=lambda r: (r["run_id"], r["seq"])),
    }
    admissions: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    ledger: list[dict[str, Any]] = []
    for wf in workflows:
        admissions.append(_row(wf.admission))
        steps.extend(_row(s) for s in wf.step_runs)
        ledger.extend(_row(e) for e in wf.ledger)
    if admissions:
        out["workflow_admissions"] = sorted(admissions, key=lambda r: r["run_id"])
        out["step_runs"] = sorted(steps, key=lambda r: r["step_run_id"])
        out["task_admissions"] = sorted(ledger, key=lambda r: r["attempt_id"])
        if not ledger:
            del out["task_admissions"]
    action_rows = sorted((action_row(a) for a in actions), key=lambda r: r["action_id"])
    if action_rows:
        out["approved_actions"] = action_rows
    event_rows = sorted(
        (action_event_row(e) for e in action_events), key=lambda r: (r["action_id"], r["seq"])
    )
    if event_rows:
        out["action_events"] = event_rows
    return out


_KEYS = {
    "runs": ("run_id",),
    "attempts": ("attempt_id",),
    "policies": ("run_id",),
    "leases": ("attempt_id", "lease_generation"),
    "events": ("run_id", "seq"),
    "workflow_admissions": ("run_id",),
    "step_runs": ("step_run_id",),
    "task_admissions": ("attempt_id",),
    "approved_actions": ("action_id",),
    "action_events": ("action_id", "seq"),
}


def _rows(projection: Projection, table: str) -> dict[str, Mapping[str, Any]]:
    return {"/".join(str(r[k]) for k in _KEYS[table]): r for r in projection.get(table, [])}


def _compare(before: Projection, after: Projection) -> list[tuple[str, str, object, object]]:
    """(row label, field or "" for a whole row, before value, after value) for every
    difference; a missing row is `None`."""
    found: list[tuple[str, str, object, object]] = []
    for table in TABLES:
        want, got = _rows(before, table), _rows(after, table)
        for k in sorted(want.keys() - got.keys()):
            found.append((f"{table}[{k}]", "", want[k], None))
        for k in sorted(got.keys() - want.keys()):
            found.append((f"{table}[{k}]", "", None, got[k]))
        for k in sorted(want.keys() & got.keys()):
            for name in sorted(want[k].keys() | got[k].keys()):
                a, b = want[k].get(name), got[k].get(name)
                if a != b:
                    found.append((f"{table}[{k}]", name, a, b))
    return found


def diff(expected: Projection, actual: Projection) -> list[str]:
    """Field-level differences, one line each: `table[key].field: expected != actual`."""
    if expected == actual:  # the common case, decided at C speed
        return []
    lines: list[str] = []
    for row, name, a, b in _compare(expected, actual):
        if not name:
            lines.append(f"{row}: missing" if b is None else f"{row}: unexpected row")
        else:
            lines.append(f"{row}.{name}: expected {a!r}, got {b!r}")
    return lines


def changes(before: Projection, after: Projection) -> list[str]:
    """What a step changed, one line each: `table[key]: new row`, `table[key].field: a -> b`."""
    if before == after:
        return []
    lines: list[str] = []
    for row, name, a, b in _compare(before, after):
        if not name:
            lines.append(f"{row}: new row" if a is None else f"{row}: removed")
        else:
            lines.append(f"{row}.{name}: {a!r} -> {b!r}")
    return lines
