"""The registry-vs-SPEC check of `.ci/run` (`scripts/check_spec_registry.py`), on inline SPEC
excerpts: the check itself runs on a fresh clone, where `../shared/SPEC.md` is absent (SR-1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel.specs.properties import PROPERTIES, Property
from scripts.check_spec_registry import (
    CHECKLIST_HEADINGS,
    NOT_IN_CHECKLISTS,
    SpecItem,
    main,
    registry_problems,
    spec_items,
)

# The SPEC's own shapes: items whose bracket wraps a line, a section that ends at the next
# heading of its level, an Appendix D addition inside a paragraph, a look-alike outside every
# checklist (which must not count).
EXCERPT = """\
# SPEC

- RUN-99 [ADR-1; PBT] not in a checklist section: ignored.

### 1.12 Checklist

Run and Events
- RUN-01 [ADR-0021, ADR-0232; PBT] After every step, invariants
  I-1..I-8 hold.
- RUN-02 [ADR-0021 §5.5; PBT+CONF] No two Attempts with the same number.
- LEASE-01 [ADR-0021 §5.4,
  ADR-0232 §2; CONF] A wrapped bracket.

### 1.13 Not a checklist

- RUN-98 [ADR-2; PBT] after the section: ignored.

### 2.6 Checklist
- REC-01 [ADR-0380 §2; CONF] Recovery.

### 3.18 Checklist
- INBOX-01 [ADR-0021; PBT+LIFE] The inbox.

### 4.10 Checklist
- WF-01 [ADR-0229 §1; LIFE] The Workflow cycle.

### 5.6 Checklist
- AA-01 [ADR-0036 §1; LIFE] The Approved Action cycle.

### 6.5 Checklist
- CAD-01 [§6.1; LIFE] The cadence.

## Appendix D. Review corrections

- D-1 Local execution path. CAD-15 [ADR-0380 §3; CONF]: cleanup never deletes a receipt
  of a non-terminal Attempt.

## Appendix E. Decisions of the second review

- E-1 Cancellation after revoked remote authority. The Run converges. CONF
  trace on both runners: cancel while running, lease expires.
- E-2 Journal ownership after a crash: no test kind named, so not an item.
"""

EXPECTED = {
    "RUN-01": SpecItem("RUN-01", "ADR-0021, ADR-0232", frozenset({"PBT"})),
    "RUN-02": SpecItem("RUN-02", "ADR-0021 §5.5", frozenset({"PBT", "CONF"})),
    "LEASE-01": SpecItem("LEASE-01", "ADR-0021 §5.4, ADR-0232 §2", frozenset({"CONF"})),
    "REC-01": SpecItem("REC-01", "ADR-0380 §2", frozenset({"CONF"})),
    "INBOX-01": SpecItem("INBOX-01", "ADR-0021", frozenset({"PBT", "LIFE"})),
    "WF-01": SpecItem("WF-01", "ADR-0229 §1", frozenset({"LIFE"})),
    "AA-01": SpecItem("AA-01", "ADR-0036 §1", frozenset({"LIFE"})),
    "CAD-01": SpecItem("CAD-01", "§6.1", frozenset({"LIFE"})),
    "CAD-15": SpecItem("CAD-15", "ADR-0380 §3", frozenset({"CONF"})),
    "E-1": SpecItem("E-1", "Appendix E", frozenset({"CONF"})),
}


def _registry(items: dict[str, SpecItem]) -> dict[str, Property]:
    return {
        pid: Property(id=pid, kind=item.kinds, statement="x", source=item.source, issue=2)
        for pid, item in items.items()
    }


def test_the_excerpt_parses_to_its_checklist_items() -> None:
    items, problems = spec_items(EXCERPT)
    assert problems == []
    assert items == EXPECTED


def test_an_agreeing_registry_has_no_problem_and_s1_needs_no_checklist() -> None:
    registry = _registry(EXPECTED)
    registry["S-1"] = Property("S-1", frozenset({"PBT"}), "redaction", "§0.4", 2)
    assert registry_problems(EXCERPT, registry) == []


def test_every_disagreement_is_one_line() -> None:
    registry = _registry(EXPECTED)
    del registry["REC-01"]  # in the SPEC only
    registry["RUN-97"] = Property("RUN-97", frozenset({"PBT"}), "x", "ADR-9", 2)  # registry only
    registry["RUN-02"] = Property("RUN-02", frozenset({"PBT"}), "x", "ADR-0021 §5.5", 2)
    registry["CAD-15"] = Property("CAD-15", frozenset({"CONF"}), "x", "ADR-0380", 6)
    assert registry_problems(EXCERPT, registry) == [
        "REC-01: in a SPEC checklist, not in kernel/specs/properties.py",
        "RUN-97: in kernel/specs/properties.py, in no SPEC checklist",
        "CAD-15: source 'ADR-0380' in the registry, 'ADR-0380 §3' in the SPEC",
        "RUN-02: kinds PBT in the registry, CONF+PBT in the SPEC",
    ]


@pytest.mark.parametrize("heading", CHECKLIST_HEADINGS)
def test_a_missing_or_empty_checklist_is_a_problem_not_a_silent_pass(heading: str) -> None:
    """The parser must never read less than the SPEC says without saying so."""
    registry = _registry(EXPECTED)
    missing = EXCERPT.replace(heading, "### 9.9 Renamed")
    assert f"SPEC: no section {heading!r}" in registry_problems(missing, registry)
    start = EXCERPT.index(heading) + len(heading)
    end = EXCERPT.index("\n#", start)
    emptied = EXCERPT[:start] + "\n\nno items any more\n" + EXCERPT[end:]
    assert f"SPEC: section {heading!r} lists no checklist item" in registry_problems(
        emptied, registry
    )


@pytest.mark.parametrize("heading", ["## Appendix D.", "## Appendix E."])
def test_a_missing_appendix_is_a_problem(heading: str) -> None:
    renamed = EXCERPT.replace(heading, "## Appendix Z.")
    assert f"SPEC: no section {heading!r}" in registry_problems(renamed, _registry(EXPECTED))


def test_an_appendix_e_decision_is_an_item_only_when_it_asks_for_a_test() -> None:
    """E-1 names its CONF trace (wrapped across a line); E-2 names no test kind."""
    items, _ = spec_items(EXCERPT)
    assert items["E-1"] == SpecItem("E-1", "Appendix E", frozenset({"CONF"}))
    assert "E-2" not in items
    both = EXCERPT.replace("- E-2 Journal ownership", "- E-2 A PBT test and a CONF trace:")
    assert spec_items(both)[0]["E-2"].kinds == frozenset({"PBT", "CONF"})


def _spec_of_the_registry() -> str:
    """A SPEC text whose checklists list exactly the real registry (minus S-1 and E-7)."""
    lines = [heading + "\n" for heading in CHECKLIST_HEADINGS]
    items = [
        f"- {p.id} [{p.source}; {'+'.join(sorted(p.kind))}] {p.statement}"
        for p in PROPERTIES.values()
        if p.id not in NOT_IN_CHECKLISTS
    ]
    lines[0] += "\n".join(items)
    for index in range(1, len(lines)):
        lines[index] += "- X-1 [a; PBT] keeps the section non-empty (X-1 is then extra)"
    return "\n".join(lines) + "\n## Appendix D. Review corrections\n\n## Appendix E. Decisions\n"


def test_main_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = tmp_path / "SPEC.md"
    spec.write_text(_spec_of_the_registry().replace("- X-1 [a; PBT] keeps", "keeps"), "utf-8")
    assert main([str(spec)]) == 1  # five sections now list nothing
    assert capsys.readouterr().out.count("lists no checklist item") == 5
    spec.write_text(_spec_of_the_registry(), "utf-8")
    assert main([str(spec)]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "X-1: in a SPEC checklist, not in kernel/specs/properties.py"
    ]
    rule = PROPERTIES["S-1"]  # listed here as an item: it must then agree like any other
    listed = f"- S-1 [{rule.source}; {'+'.join(sorted(rule.kind))}]"
    agreeing = _spec_of_the_registry().replace("- X-1 [a; PBT]", listed)
    spec.write_text(agreeing, "utf-8")
    assert main([str(spec)]) == 0, capsys.readouterr().out
    assert capsys.readouterr().out.startswith(
        # E-2 and E-7 are none (S-1 is listed here)
        f"spec registry: {len(PROPERTIES) - len(NOT_IN_CHECKLISTS - {'S-1'})} checklist ids of "
        f"{spec} agree"
    )
    assert main([str(tmp_path / "absent.md")]) == 2
    assert "cannot read the SPEC" in capsys.readouterr().err
