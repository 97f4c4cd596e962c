"""Check the property registry (`kernel/specs/properties.py`) against the SPEC's checklists.

    .venv/bin/python scripts/check_spec_registry.py [SPEC]     # default: ../shared/SPEC.md

Every checklist item of SPEC §1.12, §2.6, §3.18, §4.10 and §6.5 ("- RUN-01 [ADR-0021; PBT] ...") and
every Appendix D addition ("CAD-15 [ADR-0380 §3; CONF]") must be registered with the same
bracketed source and the same test kinds (SPEC §0.2), and the registry must hold no id the SPEC
does not list (S-1 of §0.4, E-2 and E-7 are the registered rules that are not checklist items). An
Appendix E decision ("- E-1 Title ... CONF trace on both runners ...") that asks for a test of a
kind ("CONF trace", "PBT test") is an item too: it has no bracket, so its source is "Appendix E" and
its kinds are the ones it names; a decision that names none (E-2 .. E-8 today) is not. Exit 0 when
they agree, 1 with one line per problem, 2 when the SPEC cannot be read.

The SPEC lives outside this repository (`shared/` beside the clone), so this is a step of
`.ci/run`, run where the file exists, and not a test: the README's test command needs nothing
outside the clone (decision SR-1). The comparison itself is pure (`spec_items`,
`registry_problems`) and tested on an inline SPEC excerpt in
`tests/scripts/test_check_spec_registry.py`.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from kernel.specs.properties import PROPERTIES, Property

__all__ = [
    "APPENDIX_D_HEADING",
    "APPENDIX_E_HEADING",
    "APPENDIX_E_SOURCE",
    "CHECKLIST_HEADINGS",
    "DEFAULT_SPEC",
    "NOT_IN_CHECKLISTS",
    "SpecItem",
    "main",
    "registry_problems",
    "spec_items",
]

DEFAULT_SPEC: Final = Path(__file__).resolve().parents[1].parent / "shared" / "SPEC.md"
CHECKLIST_HEADINGS: Final = (
    "### 1.12 Checklist",
    "### 2.6 Checklist",
    "### 3.18 Checklist",
    "### 4.10 Checklist",
    "### 5.6 Checklist",
    "### 6.5 Checklist",
)
APPENDIX_D_HEADING: Final = "## Appendix D."
APPENDIX_E_HEADING: Final = "## Appendix E."
#: The registry's source of an Appendix E item (the appendix gives no bracketed source).
APPENDIX_E_SOURCE: Final = "Appendix E"
#: Registered ids that no checklist lists: the redaction rule of §0.4, and E-2 and E-7 (Appendix E
#: rules that name no test kind; registered so that the journal lock's and the exit-code tests
#: cite them).
NOT_IN_CHECKLISTS: Final = frozenset({"S-1", "E-2", "E-7"})

# A checklist item: "- RUN-01 [ADR-0021, ADR-0232; PBT] ..." (the bracket may wrap a line).
_ITEM: Final = re.compile(r"^\s*- ([A-Z0-9]+-\d+) \[([^\]]+)\]", re.MULTILINE)
# An Appendix D addition: "CAD-15 [ADR-0380 §3; CONF]" anywhere in the appendix.
_ADDED: Final = re.compile(r"\b([A-Z0-9]+-\d+) \[([^\]]+); ([A-Z+]+)\]")
# An Appendix E decision: "- E-1 Title ..." up to the next list item or heading.
_DECISION: Final = re.compile(r"^- (E-\d+) (.*?)(?=^- |^#|\Z)", re.MULTILINE | re.DOTALL)
# The test it asks for: "CONF trace on both runners", "a PBT test".
_ASKED: Final = re.compile(r"\b(PBT|CONF|LIFE) (?:trace|test)")


@dataclass(frozen=True, slots=True)
class SpecItem:
    """One checklist id as the SPEC states it: its bracketed source and its test kinds."""

    id: str
    source: str
    kinds: frozenset[str]


def _section(text: str, heading: str) -> str | None:
    """The text from `heading` to the next heading of the same or a higher level."""
    start = text.find(heading)
    if start < 0:
        return None
    level = heading.split(" ", 1)[0]
    following = re.compile(rf"^#{{1,{len(level)}}} ", re.MULTILINE)
    end = following.search(text, start + len(heading))
    return text[start : end.start() if end else len(text)]


def spec_items(text: str) -> tuple[dict[str, SpecItem], list[str]]:
    """The checklist items of a SPEC text, and the structural problems found while reading it
    (a checklist heading missing or listing nothing: the parser must not silently read less)."""
    items: dict[str, SpecItem] = {}
    problems: list[str] = []
    for heading in CHECKLIST_HEADINGS:
        section = _section(text, heading)
        if section is None:
            problems.append(f"SPEC: no section {heading!r}")
            continue
        found = _ITEM.findall(section)
        if not found:
            problems.append(f"SPEC: section {heading!r} lists no checklist item")
        for pid, bracket in found:
            source, _, kinds = " ".join(bracket.split()).rpartition("; ")
            items[pid] = SpecItem(pid, source, frozenset(kinds.split("+")))
    appendix = _section(text, APPENDIX_D_HEADING)
    if appendix is None:
        problems.append(f"SPEC: no section {APPENDIX_D_HEADING!r}")
    else:
        for pid, source, kinds in _ADDED.findall(appendix):
            items[pid] = SpecItem(pid, " ".join(source.split()), frozenset(kinds.split("+")))
    decisions = _section(text, APPENDIX_E_HEADING)
    if decisions is None:
        problems.append(f"SPEC: no section {APPENDIX_E_HEADING!r}")
    else:
        for pid, body in _DECISION.findall(decisions):
            asked = frozenset(_ASKED.findall(" ".join(body.split())))
            if asked:
                items[pid] = SpecItem(pid, APPENDIX_E_SOURCE, asked)
    return items, problems


def _kinds(kinds: frozenset[str]) -> str:
    return "+".join(sorted(kinds))


def registry_problems(text: str, registry: Mapping[str, Property]) -> list[str]:
    """One line per disagreement between a SPEC text and a property registry; empty when they
    agree."""
    items, problems = spec_items(text)
    for pid in sorted(set(items) - set(registry)):
        problems.append(f"{pid}: in a SPEC checklist, not in kernel/specs/properties.py")
    for pid in sorted(set(registry) - set(items) - NOT_IN_CHECKLISTS):
        problems.append(f"{pid}: in kernel/specs/properties.py, in no SPEC checklist")
    for pid in sorted(set(items) & set(registry)):
        item, prop = items[pid], registry[pid]
        if prop.source != item.source:
            problems.append(
                f"{pid}: source {prop.source!r} in the registry, {item.source!r} in the SPEC"
            )
        if prop.kind != item.kinds:
            problems.append(
                f"{pid}: kinds {_kinds(prop.kind)} in the registry, "
                f"{_kinds(item.kinds)} in the SPEC"
            )
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="check_spec_registry.py",
        description="check kernel/specs/properties.py against the SPEC's checklists",
    )
    parser.add_argument("spec", nargs="?", type=Path, default=DEFAULT_SPEC)
    args = parser.parse_args(argv)
    try:
        text = args.spec.read_text(encoding="utf-8")
    except OSError as exc:
        print(f"cannot read the SPEC at {args.spec}: {exc.strerror}", file=sys.stderr)
        return 2
    problems = registry_problems(text, PROPERTIES)
    for line in problems:
        print(line)
    if problems:
        print(f"spec registry: {len(problems)} problem(s) against {args.spec}", file=sys.stderr)
        return 1
    items, _ = spec_items(text)
    print(f"spec registry: {len(items)} checklist ids of {args.spec} agree with the registry")
    return 0


if __name__ == "__main__":
    sys.exit(main())
