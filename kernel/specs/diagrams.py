"""State diagrams generated from the literal transition tables (ARCHITECTURE rule 2).

`render()` returns Markdown with one Mermaid `stateDiagram-v2` per machine, drawn by
`Table.mermaid()` from the same `Table` the code consults; the committed `docs/state-diagrams.md`
is its output (`python scripts/generate_state_diagrams.py`; a test keeps the two equal).
"""

from __future__ import annotations

from typing import Any, Final

from kernel.specs.approved_action import ACTION_TABLE
from kernel.specs.cadence import CADENCE_TABLE
from kernel.specs.inbox_lifecycle import INBOX_TABLE
from kernel.specs.journal import JOURNAL_TABLE, TRIGGER_REASONS
from kernel.specs.journal_ownership import OWNERSHIP_TABLE
from kernel.specs.table import Table
from kernel.specs.tables import ATTEMPT_TABLE, LEASE_TABLE, RUN_TABLE
from kernel.specs.worker_session import SESSION_TABLE
from kernel.specs.workflow import STEP_RUN_TABLE, TASK_ATTEMPT_TABLE, WORKFLOW_RUN_TABLE

#: Every machine's table with the module that holds it and what its heading says, in the order
#: of the document (the Run side, the Worker side, the lifecycles, the Workflow side, then
#: the approval domain).
DIAGRAMS: Final[tuple[tuple[str, Table[Any, Any], str], ...]] = (
    ("Run", RUN_TABLE, "kernel/specs/tables.py"),
    ("Attempt (the latest Attempt a command addresses)", ATTEMPT_TABLE, "kernel/specs/tables.py"),
    (
        "Run dispatch lease (the lease rows a command changes)",
        LEASE_TABLE,
        "kernel/specs/tables.py",
    ),
    ("Journal record (SPEC §3.6)", JOURNAL_TABLE, "kernel/specs/journal.py"),
    ("Journal ownership (SPEC §3.9)", OWNERSHIP_TABLE, "kernel/specs/journal_ownership.py"),
    ("Inbox lifecycle (SPEC §3.10)", INBOX_TABLE, "kernel/specs/inbox_lifecycle.py"),
    (
        "Worker session (SPEC §1.1, §3.8; the cluster registry, WS-1, WS-2)",
        SESSION_TABLE,
        "kernel/specs/worker_session.py",
    ),
    ("Cadence lifecycle (SPEC §6.1, L-1..L-9)", CADENCE_TABLE, "kernel/specs/cadence.py"),
    ("Workflow Run (SPEC §4.4)", WORKFLOW_RUN_TABLE, "kernel/specs/workflow.py"),
    (
        "StepRun (SPEC §4.1, §4.4; the StepRuns a command changes)",
        STEP_RUN_TABLE,
        "kernel/specs/workflow.py",
    ),
    (
        "Task Attempt (SPEC §4.3-§4.5; the Task Attempts a command changes)",
        TASK_ATTEMPT_TABLE,
        "kernel/specs/workflow.py",
    ),
    (
        "Approved action (SPEC §5.1's approval domain; issue 19, decision AA-D1)",
        ACTION_TABLE,
        "kernel/specs/approved_action.py",
    ),
)


def _section(title: str, table: Table[Any, Any], module: str) -> str:
    lines = [f"### {title}", "", f"`{module}`, {len(table.edges())} edges.", ""]
    if table is JOURNAL_TABLE:
        lines.append("Recovery reasons the rows write (`TRIGGER_REASONS`):")
        lines.append("")
        for trigger, reasons in TRIGGER_REASONS.items():
            names = ", ".join(sorted(reason.value for reason in reasons))
            lines.append(f"- `{trigger.value}`: {names}")
        lines.append("")
    lines += ["```mermaid", table.mermaid(), "```", ""]
    return "\n".join(lines)


def render() -> str:
    return "\n".join(
        [
            "# State diagrams",
            "",
            "Generated from the `Table` of every machine (`kernel/specs/table.py`) by"
            " `scripts/generate_state_diagrams.py`; do not edit by hand. An arrow lists every"
            " trigger (a command name on the Run side) that may take it; `[*]` is no entity"
            " (an arrow from it creates, an arrow to it deletes).",
            "",
            *(_section(title, table, module) for title, table, module in DIAGRAMS),
        ]
    )
