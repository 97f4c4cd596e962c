"""Kernel throughput with contracts on and off, measured in the same run.

Contracts follow icontract's default (`enabled=__debug__`), so "off" is the same code under
`python -O`. The script starts worker processes of itself, alternately with and without `-O`,
each driving a fixed workload through the public transitions, and prints transitions per second
and the ratio (machines are noisy: compare ratios, never absolute times).

    python benchmarks/kernel.py [--rounds 3] [--runs 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
# Run as `python benchmarks/kernel.py`, this file's folder is sys.path[0] and its name would
# shadow the `kernel` package: drop the folder before importing the package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kernel import (  # noqa: E402
    AcknowledgeRunning,
    AcknowledgeStarting,
    AdmitRun,
    Applied,
    Command,
    CompleteWithLease,
    CompletionOutcome,
    ExpireWithLease,
    Fence,
    GrantLease,
    LostRetryStep,
    PolicyDefinition,
    Profile,
    RenewLease,
    Safety,
    Secret,
    WorkerSession,
    WorkerSessionStatus,
    apply,
)


def workload(runs: int) -> int:
    """Drive `runs` Runs through admission, dispatch, start, renew, completion and through the
    lost-retry path; return the number of transitions applied."""

    worker = WorkerSession("w1", "s1", 1, WorkerSessionStatus.ONLINE, 10**12, ("shell",))
    policy = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 60_000)
    count = 0
    for i in range(runs):
        run_id, attempt_id = f"r{i}", f"a{i}"
        token = Secret.of(f"token_{i}".ljust(43, "x"), "lease_token")
        now = 1_000_000
        agg = None
        steps: list[Command] = [
            AdmitRun(run_id, attempt_id, "p", "t", 1, "shell", provider_policy=policy),
            GrantLease(run_id, attempt_id, worker, token, 30_000),
        ]
        for command in steps:
            now += 10
            out = apply(agg, command, now)
            assert isinstance(out, Applied)
            agg, count = out.aggregate, count + 1
        fence = Fence("w1", "s1", 1, 1, token, 1)
        for command in (
            AcknowledgeStarting(run_id, attempt_id, fence, worker),
            RenewLease(run_id, attempt_id, Fence("w1", "s1", 1, 1, token, 2), worker, 30_000),
            AcknowledgeRunning(
                run_id, attempt_id, Fence("w1", "s1", 1, 1, token, 3), worker, "pid:1", now
            ),
        ):
            now += 10
            out = apply(agg, command, now)
            assert isinstance(out, Applied)
            agg, count = out.aggregate, count + 1
        if i % 2:
            done = CompleteWithLease(
                run_id,
                attempt_id,
                Fence("w1", "s1", 1, 1, token, 4),
                worker,
                1,
                CompletionOutcome.SUCCEEDED,
                0,
            )
            out = apply(agg, done, now + 10)
            assert isinstance(out, Applied)
            count += 1
            continue
        for command, at in (
            (ExpireWithLease(run_id, attempt_id, 1, Profile.EDGE), now + 60_000),
            (LostRetryStep(run_id, f"b{i}"), now + 60_001),
            (LostRetryStep(run_id, f"b{i}"), now + 200_000),
        ):
            out = apply(agg, command, at)
            assert isinstance(out, Applied)
            agg, count = out.aggregate, count + 1
    return count


def worker_main(runs: int) -> None:
    workload(max(1, runs // 10))  # warm-up: imports, caches
    start = time.perf_counter()
    transitions = workload(runs)
    elapsed = time.perf_counter() - start
    print(json.dumps({"contracts": __debug__, "transitions": transitions, "seconds": elapsed}))


def measure(optimize: bool, runs: int) -> float:
    cmd = [sys.executable, *(["-O"] if optimize else []), __file__, "--worker", "--runs", str(runs)]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["contracts"] is (not optimize)
    return float(result["transitions"]) / float(result["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker_main(args.runs)
        return
    on: list[float] = []
    off: list[float] = []
    for round_no in range(1, args.rounds + 1):
        on.append(measure(False, args.runs))
        off.append(measure(True, args.runs))
        print(f"round {round_no}: contracts on {on[-1]:,.0f}/s, off {off[-1]:,.0f}/s", flush=True)
    on_median, off_median = statistics.median(on), statistics.median(off)
    print()
    print("kernel transitions per second (median of rounds, same run)")
    print(f"  contracts on  : {on_median:12,.0f}")
    print(f"  contracts off : {off_median:12,.0f}")
    print(f"  ratio off/on  : {off_median / on_median:12.1f}x")


if __name__ == "__main__":
    main()
