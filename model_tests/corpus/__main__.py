"""Regenerate (or check) the committed trace corpora under `conformance/traces/run/`,
`conformance/traces/workflow/` and `conformance/traces/approved_action/`.

    .venv/bin/python -m model_tests.corpus            # rewrite every trace, print a summary
    .venv/bin/python -m model_tests.corpus --check    # compare, write nothing; exit 1 on drift

Named scenarios (`model_tests.corpus.scenarios`) are written as `<name>.jsonl`; the generated
corpus is `GENERATED_COUNT` seeded model runs (`model_tests.machines.record_trace`, seeds from
`BASE_SEED`) written as `generated/<machine>-<profile>-<seed>.jsonl.gz`. The comparison is of
the decompressed text, so a different zlib cannot make `--check` fail. The Workflow corpus
(SPEC §4.10) is `model_tests.corpus.workflow_scenarios`: its named `WF-..` traces and its seeded
random Workflows under `generated/`. The approval-domain corpus (SPEC §5, issue 19) is
`model_tests.corpus.approval_scenarios`: its named `AA-D1-..` traces and its seeded random
traces under `generated/`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from conformance.run.corpus import (
    APPROVAL_CORPUS,
    RUN_CORPUS,
    WORKFLOW_CORPUS,
    read_text,
    trace_paths,
    write_text,
)
from conformance.run.trace import Trace, dumps
from kernel.specs.states import Profile
from model_tests.corpus import approval_scenarios, workflow_scenarios
from model_tests.corpus.scenarios import SCENARIOS
from model_tests.machines import record_trace

BASE_SEED = 3_000
PROFILES = (Profile.EDGE, Profile.STANDALONE, Profile.CLUSTER)
# (machine, rule steps per run): the retry machine's teardown drives its last Run to the end,
# so its traces are longer than its step count.
MACHINE_STEPS = (("lifecycle", 30), ("retry", 6))
PER_COMBINATION = 40
GENERATED_COUNT = len(PROFILES) * len(MACHINE_STEPS) * PER_COMBINATION


def generated() -> Iterator[tuple[str, Trace]]:
    """The generated corpus: 40 runs per (machine, profile), seeds `BASE_SEED + i`."""
    index = 0
    for machine, steps in MACHINE_STEPS:
        for profile in PROFILES:
            for _ in range(PER_COMBINATION):
                seed = BASE_SEED + index
                index += 1
                name = f"{machine}-{profile.value}-{seed}"
                trace = record_trace(machine, seed=seed, steps=steps, profile=profile, name=name)
                yield f"generated/{name}.jsonl.gz", trace


def named() -> Iterator[tuple[str, Trace]]:
    for name, build in SCENARIOS.items():
        yield f"{name}.jsonl", build()


def _sync(root: Path, traces: Iterator[tuple[str, Trace]], check: bool) -> tuple[int, int, int]:
    """Compare (and unless `check`, rewrite) one corpus directory: (steps, differ, extra)."""
    expected: dict[str, str] = {}
    steps = 0
    for relative, trace in traces:
        expected[relative] = dumps(trace)
        steps += len(trace.steps)
    present = {str(p.relative_to(root)): p for p in trace_paths(root)} if root.exists() else {}
    drift = sorted(
        rel
        for rel, text in expected.items()
        if rel not in present or read_text(present[rel]) != text
    )
    extra = sorted(set(present) - set(expected))
    if check:
        for rel in drift:
            print(f"differs or missing: {root.name}/{rel}")
        for rel in extra:
            print(f"not produced by the generator: {root.name}/{rel}")
        return steps, len(drift), len(extra)
    for rel in extra:
        present[rel].unlink()
    for rel in drift:
        write_text(root / rel, expected[rel])
    return steps, len(drift), len(extra)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m model_tests.corpus", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 on drift")
    parser.add_argument("--root", type=Path, default=RUN_CORPUS, help="corpus directory")
    parser.add_argument(
        "--workflow-root",
        type=Path,
        default=WORKFLOW_CORPUS,
        help="Workflow corpus directory (SPEC §4.10)",
    )
    parser.add_argument(
        "--approval-root",
        type=Path,
        default=APPROVAL_CORPUS,
        help="approval-domain corpus directory (SPEC §5, issue 19)",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    steps, drift, extra = _sync(args.root, iter((*named(), *generated())), args.check)
    wf_steps, wf_drift, wf_extra = _sync(
        args.workflow_root,
        iter((*workflow_scenarios.named(), *workflow_scenarios.generated())),
        args.check,
    )
    aa_steps, aa_drift, aa_extra = _sync(
        args.approval_root,
        iter((*approval_scenarios.named(), *approval_scenarios.generated())),
        args.check,
    )
    summary = (
        f"{len(SCENARIOS)} named + {GENERATED_COUNT} generated traces, {steps} steps; "
        f"workflow: {len(workflow_scenarios.WORKFLOW_SCENARIOS)} named + "
        f"{len(workflow_scenarios.GENERATED_SEEDS)} generated traces, {wf_steps} steps; "
        f"approved_action: {len(approval_scenarios.APPROVAL_SCENARIOS)} named + "
        f"{len(approval_scenarios.GENERATED_SEEDS)} generated traces, {aa_steps} steps; "
        f"{time.monotonic() - started:.1f} s"
    )
    drift, extra = drift + wf_drift + aa_drift, extra + wf_extra + aa_extra
    if args.check:
        print(f"corpus check: {summary}; {drift} differ, {extra} extra")
        return 1 if drift or extra else 0
    print(
        f"corpus written to {args.root}, {args.workflow_root} and {args.approval_root}: "
        f"{summary}; "
        f"{drift} rewritten, {extra} removed"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
