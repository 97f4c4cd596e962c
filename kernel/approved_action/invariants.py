"""What every approved action satisfies (decision AA-D1), checked after every transition (the
contracts) and every model step.

- AA-I1 `version == event_seq >= 1`: every change appends exactly one Event.
- AA-I2 the decision fields are set iff the action left `pending`; `claimed_at_ms` iff it passed
  the start barrier (`starting` and after, `denied` never).
- AA-I3 `finished_at_ms` iff the status is final; `code` iff `failed` or `manual_required`.
- AA-I4 times never go backwards: requested <= decided <= claimed <= finished <= updated.
- AA-I5 a `started` action's Run exists and is the Run of its admission (`run_matches`).
"""

from __future__ import annotations

from kernel.approved_action.entities import ApprovedAction
from kernel.entities import RunAggregate
from kernel.specs.approved_action import ActionStatus
from kernel.specs.invariants import Violation

__all__ = ["check_action_invariants", "run_matches"]

_BARRIER_PASSED = frozenset(
    {
        ActionStatus.STARTING,
        ActionStatus.STARTED,
        ActionStatus.FAILED,
        ActionStatus.MANUAL_REQUIRED,
    }
)


def run_matches(action: ApprovedAction, run: RunAggregate) -> bool:
    """Whether `run` is the Run `action` admits: same ids, task, revision, project, executor."""
    a = action.admission
    r = run.run
    first = run.attempts[0].attempt_id if run.attempts else None
    return (
        r.run_id == a.run_id
        and first == a.attempt_id
        and r.task_id == a.task_id
        and r.task_revision == a.task_revision
        and r.project_id == a.project_id
        and r.executor_type == a.executor_type
    )


def check_action_invariants(
    action: ApprovedAction, run: RunAggregate | None = None, *, with_run: bool = False
) -> list[Violation]:
    """The violations of AA-I1..AA-I4 (and AA-I5 when `with_run`: `run` is what the store holds
    under the action's Run id)."""
    out: list[Violation] = []
    key = action.action_id

    def bad(rule: str, text: str) -> None:
        out.append(Violation(rule, key, text))

    if action.version < 1 or action.version != action.event_seq:
        bad("AA-I1", "version and event_seq differ or are below 1")
    decided = action.decided_by is not None
    if decided != (action.decided_at_ms is not None):
        bad("AA-I2", "decided_by and decided_at_ms disagree")
    if decided == (action.status is ActionStatus.PENDING):
        bad("AA-I2", "decision fields do not match the status")
    if (action.claimed_at_ms is not None) != (action.status in _BARRIER_PASSED):
        bad("AA-I2", "claimed_at_ms does not match the status")
    if (action.finished_at_ms is not None) != action.status.final:
        bad("AA-I3", "finished_at_ms does not match the status")
    coded = action.status in (ActionStatus.FAILED, ActionStatus.MANUAL_REQUIRED)
    if (action.code is not None) != coded:
        bad("AA-I3", "code does not match the status")
    times = [
        t
        for t in (
            action.requested_at_ms,
            action.decided_at_ms,
            action.claimed_at_ms,
            action.finished_at_ms,
            action.updated_at_ms,
        )
        if t is not None
    ]
    if times != sorted(times) or action.requested_at_ms < 0:
        bad("AA-I4", "times go backwards")
    started = action.status is ActionStatus.STARTED
    if with_run and started and (run is None or not run_matches(action, run)):
        bad("AA-I5", "a started action without its Run")
    return out
