"""The committed state diagrams are exactly what the tables generate."""

from __future__ import annotations

from pathlib import Path

from kernel.specs.diagrams import render

ROOT = Path(__file__).resolve().parents[3]


def test_committed_diagrams_match_the_tables() -> None:
    committed = (ROOT / "docs" / "state-diagrams.md").read_text(encoding="utf-8")
    assert committed == render(), "run: python scripts/generate_state_diagrams.py"
    assert "queued --> dispatching: activate_local, grant_lease" in committed
