"""The committed state diagrams are exactly what the tables generate."""

from __future__ import annotations

from pathlib import Path

from kernel.specs.approved_action import ACTION_TABLE
from kernel.specs.cadence import CADENCE_TABLE
from kernel.specs.diagrams import DIAGRAMS, render
from kernel.specs.inbox_lifecycle import INBOX_TABLE
from kernel.specs.journal import JOURNAL_TABLE
from kernel.specs.journal_ownership import OWNERSHIP_TABLE
from kernel.specs.tables import ATTEMPT_TABLE, LEASE_TABLE, RUN_TABLE
from kernel.specs.worker_session import SESSION_TABLE
from kernel.specs.workflow import STEP_RUN_TABLE, TASK_ATTEMPT_TABLE, WORKFLOW_RUN_TABLE

ROOT = Path(__file__).resolve().parents[3]


def test_committed_diagrams_match_the_tables() -> None:
    committed = (ROOT / "docs" / "state-diagrams.md").read_text(encoding="utf-8")
    assert committed == render(), "run: python scripts/generate_state_diagrams.py"
    assert "queued --> dispatching: activate_local, grant_lease" in committed
    assert "[*] --> accepted: delivery_accepted" in committed  # a creation edge
    assert "completion_acknowledged --> [*]: retention_delete" in committed  # a deletion edge


def test_every_machine_has_a_diagram_of_every_edge() -> None:
    """Twelve machines, one diagram each, every edge drawn (one arrow per source and target)."""
    tables = [table for _title, table, _module in DIAGRAMS]
    expected = [
        RUN_TABLE,
        ATTEMPT_TABLE,
        LEASE_TABLE,
        JOURNAL_TABLE,
        OWNERSHIP_TABLE,
        INBOX_TABLE,
        SESSION_TABLE,
        CADENCE_TABLE,
        WORKFLOW_RUN_TABLE,
        STEP_RUN_TABLE,
        TASK_ATTEMPT_TABLE,
        ACTION_TABLE,
    ]
    assert [id(t) for t in tables] == [id(t) for t in expected]
    document = render()
    assert document.count("```mermaid") == len(expected)
    for table in tables:
        arrows = table.mermaid().splitlines()[1:]
        assert len(arrows) == len({(e.source, e.target) for e in table.edges()})
        for edge in table.edges():
            source = "[*]" if edge.source is None else edge.source.value
            target = "[*]" if edge.target is None else edge.target.value
            line = next(a for a in arrows if a.strip().startswith(f"{source} --> {target}:"))
            assert edge.trigger.value in line.split(": ", 1)[1].split(", ")
        assert table.mermaid() in document
