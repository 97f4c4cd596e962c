"""Deep model checking: run the model machines for at least N steps.

Usage (from the repository root, with the project's virtual environment):

    .venv/bin/python -m model_tests.deep --steps 1000000            # >= 1M steps, both machines
    .venv/bin/python -m model_tests.deep --steps 1000000 --jobs 2   # split over 2 processes
    .venv/bin/python -m model_tests.deep --steps 20000 --seed 7 --machines retry
    .venv/bin/python -m model_tests.deep --machines lifecycle --seed 5 --steps 200 \\
        --trace-dir /tmp/traces                                     # keep every episode's trace

It drives the same rules as the Hypothesis tests (`model_tests/machines.py`) with a seeded
driver: each episode is a fresh machine run of `--episode-steps` steps (default 200) whose seed
is derived from `--seed` and the job, checking every invariant after every step (plus the retry
machine's teardown, which drives its last Run to its end). The machines alternate by episode.
A progress line every 10 s reports steps, steps per second, kernel commands delivered and
invariant checks performed; the last line is the total. The run is deterministic for a given
`--seed`, `--jobs` and `--episode-steps`.

A property violation stops the run with exit status 1, naming the machine and the episode seed;
the episode's trace (JSON Lines, SPEC §7) is written to `--trace-dir` (default: the current
directory) so the conformance replayer can show it step by step.

The Hypothesis alternative is the `deep` profile (randomized, also >= 1,000,000 steps):
`QL3_HYPOTHESIS_PROFILE=deep .venv/bin/pytest model_tests/test_models.py`.

Run without `-O`: the kernel's icontract pre/postconditions stay on (the model's own checks do
not depend on them).
"""

from __future__ import annotations

import argparse
import multiprocessing
import queue
import random
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from model_tests.harness import STATS
from model_tests.machines import MACHINES, drive, write_trace

DEFAULT_EPISODE_STEPS = 200
PROGRESS_SECONDS = 10.0


@dataclass
class Totals:
    steps: int = 0
    commands: int = 0
    invariant_checks: int = 0
    episodes: int = 0
    by_machine: dict[str, int] = field(default_factory=dict)

    @classmethod
    def current(cls, episodes: int) -> Totals:
        """This process's counters (`STATS`)."""
        totals = cls(episodes=episodes)
        for name, counts in STATS.by_machine.items():
            totals.steps += counts.steps
            totals.commands += counts.commands
            totals.invariant_checks += counts.invariant_checks
            totals.by_machine[name] = counts.steps
        return totals

    @classmethod
    def sum(cls, parts: Sequence[Totals]) -> Totals:
        total = cls()
        for part in parts:
            total.steps += part.steps
            total.commands += part.commands
            total.invariant_checks += part.invariant_checks
            total.episodes += part.episodes
            for name, steps in part.by_machine.items():
                total.by_machine[name] = total.by_machine.get(name, 0) + steps
        return total

    def minus(self, base: Totals) -> Totals:
        return Totals(
            steps=self.steps - base.steps,
            commands=self.commands - base.commands,
            invariant_checks=self.invariant_checks - base.invariant_checks,
            episodes=self.episodes - base.episodes,
            by_machine={
                k: v - base.by_machine.get(k, 0)
                for k, v in self.by_machine.items()
                if v - base.by_machine.get(k, 0)
            },
        )

    def line(self, seconds: float) -> str:
        rate = self.steps / seconds if seconds > 0 else 0.0
        machines = ", ".join(f"{k} {v}" for k, v in sorted(self.by_machine.items()))
        return (
            f"{self.steps} steps ({machines}) in {seconds:.1f} s = {rate:.0f} steps/s; "
            f"{self.commands} commands, {self.invariant_checks} invariant checks, "
            f"{self.episodes} episodes"
        )


class Violation(Exception):
    """A model property failed in an episode; the message says where and how to rerun it."""


def episode_seed(base: int, job: int, index: int) -> int:
    return (base * 1_000_003 + job * 7_919 + index * 104_729) % (2**31)


def run_job(
    job: int,
    *,
    steps: int,
    seed: int,
    machines: Sequence[str],
    episode_steps: int,
    trace_dir: Path | None,
    progress: Callable[[Totals], None],
) -> Totals:
    """Run episodes until this job has made `steps` steps. `progress` gets the job's running
    totals every few seconds. Raises `Violation` on the first failed property."""
    base = Totals.current(0)
    last = time.monotonic()
    episodes = 0
    while Totals.current(episodes).minus(base).steps < steps:
        name = machines[episodes % len(machines)]
        eseed = episode_seed(seed, job, episodes)
        machine = MACHINES[name](seed=eseed, trace_name=f"deep-{name}-{eseed}")
        try:
            drive(machine, random.Random(eseed), episode_steps)
        except Exception as exc:
            path = write_trace(machine, (trace_dir or Path()) / f"deep-{name}-{eseed}.jsonl")
            raise Violation(
                f"{name} episode seed {eseed}: {type(exc).__name__}: {exc}\n"
                f"  trace: {path}\n"
                f"  rerun: python -m model_tests.deep --machines {name} --seed {eseed} "
                f"--episode-steps {episode_steps} --steps {episode_steps} --single-episode"
            ) from exc
        if trace_dir is not None:
            write_trace(machine, trace_dir / f"deep-{name}-{eseed}.jsonl")
        episodes += 1
        now = time.monotonic()
        if now - last >= PROGRESS_SECONDS / 2:
            progress(Totals.current(episodes).minus(base))
            last = now
    return Totals.current(episodes).minus(base)


def _single_episode(name: str, seed: int, episode_steps: int, trace_dir: Path | None) -> Totals:
    """Rerun exactly one episode with the seed a violation reported."""
    base = Totals.current(0)
    machine = MACHINES[name](seed=seed, trace_name=f"deep-{name}-{seed}")
    try:
        drive(machine, random.Random(seed), episode_steps)
    finally:
        if trace_dir is not None:
            write_trace(machine, trace_dir / f"deep-{name}-{seed}.jsonl")
    return Totals.current(1).minus(base)


Report = tuple[int, Totals, str | None]  # job, its running totals, "done" or a violation


def _worker(
    job: int,
    *,
    steps: int,
    seed: int,
    machines: tuple[str, ...],
    episode_steps: int,
    trace_dir: Path | None,
    reports: multiprocessing.Queue[Report],
) -> None:
    def progress(totals: Totals) -> None:
        reports.put((job, totals, None))

    try:
        totals = run_job(
            job,
            steps=steps,
            seed=seed,
            machines=machines,
            episode_steps=episode_steps,
            trace_dir=trace_dir,
            progress=progress,
        )
    except Violation as exc:
        reports.put((job, Totals(), str(exc)))
        return
    reports.put((job, totals, "done"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m model_tests.deep",
        description="Deep model checking of the Run-domain machines (see the module docstring).",
    )
    parser.add_argument("--steps", type=int, default=1_000_000, help="minimum total steps")
    parser.add_argument("--seed", type=int, default=0, help="base seed (episodes derive theirs)")
    parser.add_argument(
        "--machines",
        default=",".join(MACHINES),
        help=f"comma-separated machines to alternate (of: {', '.join(MACHINES)})",
    )
    parser.add_argument("--episode-steps", type=int, default=DEFAULT_EPISODE_STEPS)
    parser.add_argument("--jobs", type=int, default=1, help="processes; the steps are split")
    parser.add_argument("--trace-dir", type=Path, default=None, help="write episode traces here")
    parser.add_argument(
        "--single-episode",
        action="store_true",
        help="run one episode of the first machine with exactly --seed (to rerun a violation)",
    )
    args = parser.parse_args(argv)
    machines = tuple(m.strip() for m in args.machines.split(",") if m.strip())
    unknown = [m for m in machines if m not in MACHINES]
    if unknown or not machines:
        parser.error(f"unknown machine(s) {unknown}; choose from {', '.join(MACHINES)}")
    if args.steps < 1 or args.jobs < 1 or args.episode_steps < 1:
        parser.error("--steps, --jobs and --episode-steps must be positive")
    if args.trace_dir is not None:
        args.trace_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    if args.single_episode:
        totals = _single_episode(machines[0], args.seed, args.episode_steps, args.trace_dir)
        print(f"total: {totals.line(time.monotonic() - started)}", flush=True)
        return 0
    print(
        f"deep model checking: >= {args.steps} steps, machines {', '.join(machines)}, "
        f"seed {args.seed}, {args.episode_steps} steps per episode, {args.jobs} job(s)",
        flush=True,
    )
    if args.jobs == 1:
        return _run_single(args, machines, started)
    return _run_parallel(args, machines, started)


def _run_single(args: argparse.Namespace, machines: tuple[str, ...], started: float) -> int:
    last = [started]

    def progress(totals: Totals) -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_SECONDS:
            print(f"  {totals.line(now - started)}", flush=True)
            last[0] = now

    try:
        totals = run_job(
            0,
            steps=args.steps,
            seed=args.seed,
            machines=machines,
            episode_steps=args.episode_steps,
            trace_dir=args.trace_dir,
            progress=progress,
        )
    except Violation as exc:
        print(f"VIOLATION in {exc}", file=sys.stderr, flush=True)
        return 1
    print(f"total: {totals.line(time.monotonic() - started)}", flush=True)
    return 0


def _run_parallel(args: argparse.Namespace, machines: tuple[str, ...], started: float) -> int:
    ctx = multiprocessing.get_context("spawn")
    reports: multiprocessing.Queue[Report] = ctx.Queue()
    share = -(-args.steps // args.jobs)
    procs = [
        ctx.Process(
            target=_worker,
            args=(job,),
            kwargs={
                "steps": share,
                "seed": args.seed,
                "machines": machines,
                "episode_steps": args.episode_steps,
                "trace_dir": args.trace_dir,
                "reports": reports,
            },
        )
        for job in range(args.jobs)
    ]
    for proc in procs:
        proc.start()
    latest: dict[int, Totals] = {}
    done: set[int] = set()
    failure: str | None = None
    last = started
    while len(done) < len(procs) and failure is None:
        try:
            job, totals, note = reports.get(timeout=1.0)
        except queue.Empty:
            if not any(p.is_alive() for p in procs):
                break
            continue
        if note is None or note == "done":
            latest[job] = totals
        if note == "done":
            done.add(job)
        elif note is not None:
            failure = note
        now = time.monotonic()
        if now - last >= PROGRESS_SECONDS:
            print(f"  {Totals.sum(list(latest.values())).line(now - started)}", flush=True)
            last = now
    for proc in procs:
        if failure is not None and proc.is_alive():
            proc.terminate()
        proc.join()
    total = Totals.sum(list(latest.values()))
    elapsed = time.monotonic() - started
    if failure is not None:
        print(f"VIOLATION in {failure}", file=sys.stderr, flush=True)
        print(f"total: {total.line(elapsed)}", flush=True)
        return 1
    if len(done) < len(procs):
        print("a worker process ended without a report", file=sys.stderr, flush=True)
        return 2
    print(f"total: {total.line(elapsed)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
