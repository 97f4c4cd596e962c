"""Write docs/state-diagrams.md from the six transition tables (`kernel/specs/diagrams.py`)."""

from __future__ import annotations

from pathlib import Path

from kernel.specs.diagrams import render

if __name__ == "__main__":
    target = Path(__file__).resolve().parents[1] / "docs" / "state-diagrams.md"
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}")
