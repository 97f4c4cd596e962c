"""The named scenario traces: at least one per CONF item of SPEC §1.12 and §2.6 (issue 3, 4a).

Each function records one trace named `<ID>-<what it shows>` through the reference store and
checks its own expectations while recording (`model_tests.corpus.dsl`). The committed files
under `conformance/traces/run/` are the data; this module is how they are regenerated
(`python -m model_tests.corpus`). Where an item is about more than a trace can carry (a lock
order, a kill at a statement boundary, database time, a raw-token scan of every table), the trace
exercises the path and its description names the runner-level check that completes the item.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from conformance.run.faults import Fault, FaultKind
from conformance.run.trace import Trace
from kernel import (
    AcknowledgeRunning,
    AcknowledgeStarting,
    ActivateLocal,
    AdmitRun,
    CancelReason,
    CompletedEvidence,
    CompleteLocal,
    CompletionOutcome,
    ConvergeCancel,
    CreateRun,
    ExpireWithLease,
    FailOrphanedCreated,
    GrantLease,
    LiveEvidence,
    LocalReceipt,
    LostRetryStep,
    NotRunningEvidence,
    PolicyDefinition,
    RecordLocalHandle,
    RecordLocalStop,
    RecoverLocalStartup,
    RecoverRuntime,
    RenewLease,
    RequestCancel,
    Safety,
    StopResult,
    UnknownEvidence,
    UnknownReason,
    WorkerSessionStatus,
    token_digest,
)
from kernel.specs.states import Actor, Profile, RunKind, RunOwner
from model_tests.corpus import boundaries, expiry_scan, write_boundaries
from model_tests.corpus.dsl import LEASE_MS, Scenario, worker

Builder = Callable[[], Trace]
SCENARIOS: dict[str, Builder] = {}

NO_BACKOFF = PolicyDefinition(3, True, Safety.IDEMPOTENT, 0, 0)
BACKOFF = PolicyDefinition(3, True, Safety.IDEMPOTENT, 1_000, 60_000)
LOCAL = "local"
CALLBACK = token_digest("scenario-callback".ljust(40, "c"))
CRASH_AFTER = Fault(FaultKind.CRASH_AFTER_COMMIT)
CRASH_BEFORE = Fault(FaultKind.CRASH_BEFORE_COMMIT)
DUPLICATE = Fault(FaultKind.DUPLICATE_DELIVERY)


def scenario(
    name: str, description: str, *, profile: Profile = Profile.EDGE
) -> Callable[[Callable[[Scenario], None]], Builder]:
    """Register `body` as the builder of the trace `name`."""

    def register(body: Callable[[Scenario], None]) -> Builder:
        def build() -> Trace:
            s = Scenario(name, description, profile=profile)
            body(s)
            return s.trace()

        SCENARIOS[name] = build
        return build

    return register


def io_error(at_effect: int) -> Fault:
    return Fault(FaultKind.IO_ERROR, at_effect=at_effect)


# -- §1.12 Run and Events ----------------------------------------------------------------------
@scenario(
    "RUN-02-attempt-numbers-dense-under-replays",
    "RUN-02: admission, expiry and every lost-retry step delivered twice or after a lost "
    "response create Attempts 1 and 2 only: no duplicate number, no gap.",
)
def run_02(s: Scenario) -> None:
    w = worker()
    aid = s.admit("r1", NO_BACKOFF)
    s.admit("r1", NO_BACKOFF, expect="replayed")
    s.grant("r1", aid, w)
    s.starting("r1", aid, w)
    s.running("r1", aid, w)
    s.tick(LEASE_MS)
    s.expire("r1", aid, expect="applied")
    s.expire("r1", aid, expect="replayed:already_final")
    s.do(LostRetryStep("r1", "r1-a2"), "applied:scheduled", fault=CRASH_AFTER)
    s.do(LostRetryStep("r1", "r1-a2"), "applied:requeued", fault=CRASH_AFTER)
    s.do(LostRetryStep("r1", "r1-a2"), "raced:NOT_ELIGIBLE")
    s.do(LostRetryStep("r1", "r1-a3"), "raced:NOT_ELIGIBLE", fault=DUPLICATE)
    assert sorted(a.number for a in s.agg("r1").attempts) == [1, 2]


@scenario(
    "RUN-06-fault-before-commit-writes-nothing",
    "RUN-06: a crash before commit or an I/O error at each statement of admission, grant, "
    "expiry (lost + release) and the retry requeue leaves every row and Event unchanged; the "
    "clean delivery then applies. Runners also run the kill mode over every statement boundary.",
)
def run_06(s: Scenario) -> None:
    w = worker()
    admit = AdmitRun("r1", "r1-a1", "project", "task", 1, "shell", NO_BACKOFF)
    s.all_faults(admit)
    s.do(admit, "applied")
    token = s.grant_token()
    grant = GrantLease("r1", "r1-a1", w, token, LEASE_MS)
    s.all_faults(grant)
    s.do(grant, "applied")
    s.remember(token, "r1", "r1-a1")
    s.starting("r1", "r1-a1", w)
    s.running("r1", "r1-a1", w)
    s.tick(LEASE_MS)
    expire = ExpireWithLease("r1", "r1-a1", 1, s.profile)
    s.all_faults(expire)
    s.do(expire, "applied:lost")
    s.all_faults(LostRetryStep("r1", "r1-a2"))
    s.do(LostRetryStep("r1", "r1-a2"), "applied:scheduled")
    s.all_faults(LostRetryStep("r1", "r1-a2"))
    s.do(LostRetryStep("r1", "r1-a2"), "applied:requeued")


# -- leases ------------------------------------------------------------------------------------
@scenario(
    "LEASE-02-each-mismatched-fence-field-rejected",
    "LEASE-02: a renewal whose fence differs from the live lease in exactly one field (worker, "
    "session, worker generation, lease generation, token, version) is rejected with that "
    "field's code and writes nothing; the matching fence then applies.",
)
def lease_02(s: Scenario) -> None:
    w = worker()
    aid = s.launched("r1", w, None)
    live = s.fence("r1", aid, w)
    other = s.grant_token()
    for change, code in (
        ({"worker_id": "w2"}, "LEASE_WORKER_MISMATCH"),
        ({"worker_session_id": "s0"}, "LEASE_WORKER_SESSION_MISMATCH"),
        ({"worker_generation": 2}, "LEASE_WORKER_GENERATION_MISMATCH"),
        ({"lease_generation": 2}, "LEASE_MISSING"),  # no lease row of that generation
        ({"lease_token": other}, "LEASE_TOKEN_MISMATCH"),
        ({"expected_version": live.expected_version - 1}, "LEASE_VERSION_MISMATCH"),
    ):
        fence = dataclasses.replace(live, **change)
        s.do(RenewLease("r1", aid, fence, w, LEASE_MS), f"rejected:{code}")
    s.renew("r1", aid, w)


@scenario(
    "LEASE-03-exact-completion-replay-converges",
    "LEASE-03: an identical completion replay is Replayed(already_terminal), also later and "
    "with the Worker offline; a changed sequence, outcome, exit code, fence or version is "
    "rejected and writes nothing.",
)
def lease_03(s: Scenario) -> None:
    w = worker()
    aid = s.launched("r1", w, None)
    fence = s.fence("r1", aid, w)
    done = s.completion("r1", aid, w, fence, sequence=3, exit_code=0)
    s.do(done, "applied:completed", fault=CRASH_AFTER)
    s.do(done, "replayed:already_terminal")
    s.tick(LEASE_MS * 4)
    offline = worker(status=WorkerSessionStatus.OFFLINE)
    s.do(dataclasses.replace(done, worker=offline), "replayed:already_terminal")
    for change in (
        {"callback_sequence": 4},
        {"outcome": CompletionOutcome.FAILED},
        {"exit_code": 1},
        {"fence": dataclasses.replace(fence, expected_version=fence.expected_version + 1)},
        {"fence": dataclasses.replace(fence, lease_token=s.grant_token())},
    ):
        s.do(dataclasses.replace(done, **change), "rejected")


@scenario(
    "LEASE-07-local-expiry-lost-and-release-in-one-step",
    "LEASE-07: on edge, expiry of a running Attempt commits lost and the lease release in one "
    "transaction; with a cancellation intent it only releases the lease (the intent decides "
    "the Run's end, not a retry).",
)
def lease_07(s: Scenario) -> None:
    w = worker()
    a1 = s.launched("r1", w, None)
    a2 = s.launched("r2", w, None)
    s.do(RequestCancel("r2", CancelReason.USER, Actor.USER), "applied")
    s.tick(LEASE_MS)
    s.expire("r1", a1, expect="applied:lost")
    s.expire("r2", a2, expect="applied")


@scenario(
    "LEASE-08-completion-and-expiry-never-both-apply",
    "LEASE-08: completion and expiry at the same instant end in a serially reachable state: "
    "whichever commits first wins, the other is refused (a completion on an expired lease is "
    "fenced; an expiry of a completed lease is final). Runners also race them for real.",
)
def lease_08(s: Scenario) -> None:
    w = worker()
    a1 = s.launched("r1", w, None)
    a2 = s.launched("r2", w, None)
    f1 = s.fence("r1", a1, w)
    f2 = s.fence("r2", a2, w)
    s.tick(LEASE_MS - 1)
    s.renew("r1", a1, w)
    f1 = s.fence("r1", a1, w)
    s.tick(1)
    s.do(s.completion("r2", a2, w, f2), "rejected")
    s.expire("r2", a2, expect="applied:lost")
    s.tick(LEASE_MS - 2)
    s.do(s.completion("r1", a1, w, f1), "applied:completed")
    s.tick(1)
    s.expire("r1", a1, expect="replayed")


@scenario(
    "LEASE-07-expiry-source-selects-a-lease-at-its-expiry-instant",
    "LEASE-07: the lease-expiry source (§3.16, keyset (expires_at_ms, attempt_id)) returns no "
    "lease one millisecond before expires_at_ms and returns it at exactly expires_at_ms (<=); "
    "two leases come in expiry order, page by page with an exact has_more and cursor; the "
    "expiry then commits lost and the release in one step and the source no longer returns it.",
)
def lease_07_source(s: Scenario) -> None:
    w = worker()
    a1 = s.launched("r1", w, None)
    s.tick(10)
    a2 = s.launched("r2", w, None)
    expires = s.agg("r1").leases[0].expires_at_ms
    assert expires < s.agg("r2").leases[0].expires_at_ms
    s.now = expires - 1
    s.query("lease_expiry", [])
    s.now = expires
    s.query("lease_expiry", ["r1"])
    s.now = expires + 10
    page = s.query("lease_expiry", ["r1"], limit=1, has_more=True)
    s.query("lease_expiry", ["r2"], limit=1, after=tuple(page["cursor"]))
    s.query("lease_expiry", ["r1", "r2"])
    s.expire("r1", a1, expect="applied:lost")
    s.query("lease_expiry", ["r2"])
    s.expire("r2", a2, expect="applied:lost")
    s.query("lease_expiry", [])


@scenario(
    "LEASE-09-old-worker-fenced-after-lost-release",
    "LEASE-09: after lost + release the old Worker's renewal, starting and running "
    "acknowledgements and completion all fail the fence and write nothing.",
)
def lease_09(s: Scenario) -> None:
    w = worker()
    aid = s.launched("r1", w, None)
    fence = s.fence("r1", aid, w)
    s.tick(LEASE_MS)
    s.expire("r1", aid, expect="applied:lost")
    s.do(RenewLease("r1", aid, fence, w, LEASE_MS), "rejected")
    s.do(AcknowledgeStarting("r1", aid, fence, w), "rejected")
    s.do(AcknowledgeRunning("r1", aid, fence, w, "pid:1", s.now), "rejected")
    s.do(s.completion("r1", aid, w, fence), "rejected")


@scenario(
    "LEASE-10-tokens-stored-only-as-digests",
    "LEASE-10: grants, renewals and completions carry lease tokens; the projection (every "
    "table) holds only their SHA-256 digests. Runners additionally scan every table, log and "
    "Event of the replayed database for the raw tokens.",
)
def lease_10(s: Scenario) -> None:
    w = worker()
    aid = s.launched("r1", w, None)
    s.renew("r1", aid, w)
    s.do(s.completion("r1", aid, w, s.fence("r1", aid, w)), "applied:completed")


# -- retry -------------------------------------------------------------------------------------
POLICY_ARGS = {
    "max_attempts": 3,
    "retry_on_lost": True,
    "safety": "idempotent",
    "backoff_base_ms": 0,
    "backoff_max_ms": 0,
}


def admit_args(run_id: str) -> dict[str, object]:
    return {
        "run_id": run_id,
        "attempt_id": f"{run_id}-a1",
        "project_id": "project",
        "task_id": "task",
        "task_revision": 1,
        "executor_type": "shell",
    }


@scenario(
    "RETRY-01-run-command-with-retry-policy-rejected",
    "RETRY-01: a Run command that carries a retry policy itself (not the admission provider) is "
    "refused by strict decoding before anything is written (A-1).",
)
def retry_01(s: Scenario) -> None:
    s.raw("admit_run", admit_args("r1") | {"retry_policy": POLICY_ARGS}, "rejected")
    s.raw("admit_run", admit_args("r1") | {"provider_policy": POLICY_ARGS}, "rejected")
    s.raw("create_run", admit_args("r2") | {"retry_policy": POLICY_ARGS}, "rejected")
    s.raw("admit_run", admit_args("r1"), "applied", provider_policy=POLICY_ARGS)


@scenario(
    "RETRY-02-unknown-safety-rejects-admission",
    "RETRY-02: an enabled provider policy with safety unknown rejects admission: no Run, "
    "Attempt or policy row exists afterwards.",
)
def retry_02(s: Scenario) -> None:
    unknown = PolicyDefinition(3, True, Safety.UNKNOWN, 0, 0)
    s.admit("r1", unknown, expect="rejected:RUN_RETRY_POLICY_UNSAFE")
    s.admit("r1", NO_BACKOFF)


@scenario(
    "RETRY-03-retry-disabled-fails-lost-run",
    "RETRY-03: lost Runs with no policy, retry_on_lost false, or max_attempts 1 fail with "
    "RUN_LOST_RETRY_DISABLED on the next lost-retry page.",
)
def retry_03(s: Scenario) -> None:
    w = worker()
    for run_id, policy in (
        ("r1", None),
        ("r2", PolicyDefinition(3, False, Safety.IDEMPOTENT, 0, 0)),
        ("r3", PolicyDefinition(1, True, Safety.IDEMPOTENT, 0, 0)),
    ):
        s.lost(run_id, w, policy)
    s.lost_retry_page({"scanned": 3, "failed": 3, "has_more": False})
    for run_id in ("r1", "r2", "r3"):
        assert s.agg(run_id).run.error_code == "RUN_LOST_RETRY_DISABLED"


@scenario(
    "RETRY-06-retryable-lost-run-waits-for-backoff",
    "RETRY-06: a retryable lost Run becomes retry_wait at base + delay with policy version + 1, "
    "one run.retry_wait Event and no new Attempt.",
)
def retry_06(s: Scenario) -> None:
    w = worker()
    s.lost("r1", w, BACKOFF)
    s.lost_retry_page({"scanned": 1, "scheduled": 1})
    agg = s.agg("r1")
    assert agg.run.status.value == "retry_wait"
    assert len(agg.attempts) == 1


@scenario(
    "RETRY-07-retry-wait-not-before-due",
    "RETRY-07: the lost-retry source never returns a retry_wait Run before its "
    "next_attempt_at_ms: not one millisecond early, and it is returned at the due instant.",
)
def retry_07(s: Scenario) -> None:
    w = worker()
    s.lost("r1", w, BACKOFF)
    s.lost_retry_page({"scanned": 1, "scheduled": 1})
    due = s.agg("r1").policy
    assert due is not None
    assert due.next_attempt_at_ms is not None
    s.now = due.next_attempt_at_ms - 1
    s.query("lost_retry", [])
    s.lost_retry_page({"scanned": 0})
    s.do(LostRetryStep("r1", "r1-a2"), "rejected:NOT_DUE")
    s.now = due.next_attempt_at_ms
    s.query("lost_retry", ["r1"])
    s.lost_retry_page({"scanned": 1, "requeued": 1})


@scenario(
    "RETRY-08-due-retry-wait-requeued-exactly-once",
    "RETRY-08: a due retry_wait Run gets exactly one bare claimed Attempt N+1, the Run queued, "
    "the policy cleared, run.queued then attempt.claimed; Attempt N is unchanged.",
)
def retry_08(s: Scenario) -> None:
    w = worker()
    s.lost("r1", w, NO_BACKOFF)
    s.lost_retry_page({"scanned": 1, "scheduled": 1})
    s.lost_retry_page({"scanned": 1, "requeued": 1})
    s.lost_retry_page({"scanned": 0})
    agg = s.agg("r1")
    assert agg.run.status.value == "queued"
    assert len(agg.attempts) == 2


@scenario(
    "RETRY-09-retry-replay-never-creates-attempt-n-plus-2",
    "RETRY-09: replaying the requeue (lost response, duplicate delivery, another new id) is "
    "Raced or a no-op and never creates Attempt N+2.",
)
def retry_09(s: Scenario) -> None:
    w = worker()
    s.lost("r1", w, NO_BACKOFF)
    s.do(LostRetryStep("r1", "r1-a2"), "applied:scheduled")
    s.do(LostRetryStep("r1", "r1-a2"), "applied:requeued", fault=CRASH_AFTER)
    s.do(LostRetryStep("r1", "r1-a2"), "raced:NOT_ELIGIBLE")
    s.do(LostRetryStep("r1", "r1-a3"), "raced:NOT_ELIGIBLE", fault=DUPLICATE)
    s.lost_retry_page({"scanned": 0})
    assert len(s.agg("r1").attempts) == 2


@scenario(
    "RETRY-10-fault-in-requeue-rolls-back-everything",
    "RETRY-10: a crash or an I/O error at any statement of the requeue transaction rolls back "
    "the Run, the policy, the new Attempt and both Events; the clean delivery then requeues. "
    "Runners also kill the process at every statement boundary of this write.",
)
def retry_10(s: Scenario) -> None:
    w = worker()
    s.lost("r1", w, NO_BACKOFF)
    s.do(LostRetryStep("r1", "r1-a2"), "applied:scheduled")
    s.all_faults(LostRetryStep("r1", "r1-a2"))
    s.do(LostRetryStep("r1", "r1-a2"), "applied:requeued")


@scenario(
    "RETRY-12-ineligible-runs-never-selected",
    "RETRY-12: Workflow Runs, non-runtime (legacy) Runs and Runs whose latest Attempt is not "
    "lost are never selected by the lost-retry source; only the ordinary lost Run is.",
)
def retry_12(s: Scenario) -> None:
    w = worker()
    a1 = s.launched("r1", w, NO_BACKOFF)
    wf = s.admit("wf", NO_BACKOFF, kind=RunKind.WORKFLOW)
    s.grant("wf", wf, w)
    s.starting("wf", wf, w)
    s.admit("legacy", NO_BACKOFF, owner=RunOwner.LEGACY)
    busy = s.launched("busy", w, NO_BACKOFF)
    s.tick(LEASE_MS - 1)
    s.renew("busy", busy, w)
    s.tick(1)
    s.expire("r1", a1, expect="applied:lost")
    s.expire("wf", wf, expect="applied:lost")
    s.query("lost_retry", ["r1"])
    s.lost_retry_page({"scanned": 1, "scheduled": 1})


@scenario(
    "RETRY-11-cancel-intent-keeps-due-retry-wait-runs-out-of-the-source",
    "RETRY-11 / §1.8.2: a Run with a cancellation intent is never a lost-retry candidate: r1 "
    "(retry_wait, due, cancelled while waiting) and r2 (lost, cancelled) are not selected at "
    "their due time, nor processed by the page; r3 (due, no intent) is requeued. Convergence "
    "then ends r1 and r2 cancelled.",
)
def retry_11_source(s: Scenario) -> None:
    w = worker()
    for run_id in ("r1", "r3"):
        s.lost(run_id, w, BACKOFF)
    s.lost_retry_page({"scanned": 2, "scheduled": 2})
    s.lost("r2", w, BACKOFF)
    s.do(RequestCancel("r1", CancelReason.USER, Actor.USER), "applied")
    s.do(RequestCancel("r2", CancelReason.USER, Actor.USER), "applied")
    policy = s.agg("r3").policy
    assert policy is not None
    assert policy.next_attempt_at_ms is not None
    s.now = max(s.now, policy.next_attempt_at_ms) + 1
    s.query("lost_retry", ["r3"])
    s.lost_retry_page({"scanned": 1, "requeued": 1})
    s.do(ConvergeCancel("r1"), "applied")
    s.do(ConvergeCancel("r2"), "applied")
    assert s.agg("r1").run.status.value == "cancelled"


@scenario(
    "LEASE-04-worker-session-guards-on-grant-and-completion",
    "LEASE-04 with the T1 grant guard (B-16): a grant needs an online Worker session: a "
    "draining, an offline and an expired one are each refused WORKER_UNAVAILABLE, nothing "
    "written; the online one is granted. A draining session may still finish its lease, but "
    "a first completion by an offline session, or by a replaced one, is rejected.",
)
def t1_worker(s: Scenario) -> None:
    aid = s.admit("r1", NO_BACKOFF)
    for status, expires in (
        (WorkerSessionStatus.DRAINING, None),
        (WorkerSessionStatus.OFFLINE, None),
        (WorkerSessionStatus.ONLINE, s.now),
    ):
        by = worker(status=status) if expires is None else worker(expires_at_ms=expires)
        s.grant("r1", aid, by, expect="rejected:WORKER_UNAVAILABLE")
    w = worker()
    s.grant("r1", aid, w)
    assert s.agg("r1").run.status.value == "dispatching"
    s.starting("r1", aid, w)
    s.running("r1", aid, w)
    fence = s.fence("r1", aid, w)
    s.tick(1)
    offline = worker(status=WorkerSessionStatus.OFFLINE)
    s.do(s.completion("r1", aid, offline, fence), "rejected:WORKER_UNAVAILABLE")
    replaced = worker(session="s2", generation=2)
    s.do(s.completion("r1", aid, replaced, fence), "rejected")
    draining = worker(status=WorkerSessionStatus.DRAINING)
    s.do(s.completion("r1", aid, draining, fence), "applied")


@scenario(
    "RETRY-13-page-bounded-and-has-more-exact",
    "RETRY-13: one page processes at most `limit` candidates and has_more is exact (limit 2 of "
    "5, limit 4 of 5, limit 5 of 5); one call, no further page, no timer.",
)
def retry_13(s: Scenario) -> None:
    w = worker()
    for i in range(1, 6):
        s.lost(f"r{i}", w, None)
    s.query("lost_retry", ["r1", "r2", "r3", "r4"], limit=4, has_more=True)
    s.query("lost_retry", ["r1", "r2", "r3", "r4", "r5"], limit=5)
    s.lost_retry_page({"scanned": 2, "failed": 2, "has_more": True}, limit=2)
    s.lost_retry_page({"scanned": 3, "failed": 3, "has_more": False}, limit=3)
    s.lost_retry_page({"scanned": 0, "has_more": False}, limit=1)


@scenario(
    "RETRY-15-lost-before-due-retry-wait",
    "RETRY-15: within a page every lost candidate precedes every due retry_wait candidate, "
    "whatever their times.",
)
def retry_15(s: Scenario) -> None:
    w = worker()
    s.lost("early", w, NO_BACKOFF)
    s.lost_retry_page({"scanned": 1, "scheduled": 1})
    s.lost("late", w, NO_BACKOFF)
    s.query("lost_retry", ["late", "early"])
    s.lost_retry_page({"scanned": 1, "scheduled": 1}, limit=1)
    s.query("lost_retry", ["early", "late"])


@scenario(
    "RETRY-17-local-candidate-error-counted-page-continues",
    "RETRY-17 (local): a candidate whose transaction fails is left unchanged and counted "
    "errored; the rest of the page proceeds.",
)
def retry_17_local(s: Scenario) -> None:
    w = worker()
    for i in range(1, 4):
        s.lost(f"r{i}", w, None)
    s.lost_retry_page({"scanned": 3, "failed": 2, "errored": 1}, fail_candidate=2)
    assert s.agg("r2").run.status.value == "lost"
    s.lost_retry_page({"scanned": 1, "failed": 1})


@scenario(
    "RETRY-17-cluster-candidate-error-stops-page",
    "RETRY-17 (cluster): the first candidate error stops the page closed "
    "(LOST_RETRY_UNAVAILABLE); later candidates are not touched; the next page resumes.",
    profile=Profile.CLUSTER,
)
def retry_17_cluster(s: Scenario) -> None:
    w = worker()
    for i in range(1, 4):
        aid = s.launched(f"r{i}", w, None)
        s.tick(LEASE_MS)
        s.do(RecoverRuntime(f"r{i}", aid, NotRunningEvidence()), "applied:lost")
    s.lost_retry_page(
        {"scanned": 1, "failed": 1},
        fail_closed=True,
        fail_candidate=2,
        expect_kind="error",
    )
    assert s.agg("r3").run.status.value == "lost"
    s.lost_retry_page({"scanned": 2, "failed": 2}, fail_closed=True)


@scenario(
    "RETRY-18-local-activation-latest-claimed-only",
    "RETRY-18: local activation accepts only the latest claimed Attempt of an uncancelled "
    "queued local Run; a second activation (a concurrent spawner) is refused, so one spawn.",
)
def retry_18(s: Scenario) -> None:
    s.admit("r1", NO_BACKOFF, executor=LOCAL)
    s.query("local_dispatch", ["r1"], local_executor_type=LOCAL)
    activate = ActivateLocal("r1", "r1-a1", LOCAL, 1, CALLBACK)
    s.do(activate, "applied")
    s.do(activate, "raced:NOT_ELIGIBLE")
    s.do(ActivateLocal("r1", "r1-a1", LOCAL, 2, CALLBACK), "raced:NOT_ELIGIBLE")
    s.query("local_dispatch", [], local_executor_type=LOCAL)
    s.admit("r2", NO_BACKOFF, executor=LOCAL)
    s.do(RequestCancel("r2", CancelReason.USER, Actor.USER), "applied")
    s.query("local_dispatch", [], local_executor_type=LOCAL)
    s.do(ActivateLocal("r2", "r2-a1", LOCAL, 1, CALLBACK), "rejected:CANCEL_REQUESTED")


# -- §2.6 recovery -----------------------------------------------------------------------------
def local_running(s: Scenario, run_id: str, *, kind: RunKind = RunKind.ORDINARY) -> str:
    """A local-executor Run activated and running in this process (before a restart)."""
    aid = s.admit(run_id, NO_BACKOFF, executor=LOCAL, kind=kind)
    s.do(ActivateLocal(run_id, aid, LOCAL, 1, CALLBACK), "applied")
    s.do(RecordLocalHandle(run_id, aid, f"pid:{run_id}", s.now), "applied")
    return aid


@scenario(
    "REC-01-cluster-source-selects-exactly-the-candidates",
    "REC-01: the cluster runtime recovery source returns exactly the started Attempts whose "
    "lease expired or is missing; never a pristine claimed Attempt, a created Run, a live "
    "lease, a Workflow Run or a terminal Run. Order: missing leases first, then by expiry.",
    profile=Profile.CLUSTER,
)
def rec_01(s: Scenario) -> None:
    w = worker()
    s.admit("pristine", NO_BACKOFF)
    s.do(CreateRun("created", "project", "task", 1, "shell"), "applied")
    a_exp = s.launched("expired", w, NO_BACKOFF)
    s.tick(1_000)
    s.launched("later", w, NO_BACKOFF)
    a_done = s.launched("done", w, None)
    s.do(s.completion("done", a_done, w, s.fence("done", a_done, w)), "applied:completed")
    s.tick(LEASE_MS)
    s.launched("live", w, NO_BACKOFF)
    s.query("runtime_recovery", ["expired", "later"])
    s.do(RecoverRuntime("expired", a_exp, NotRunningEvidence()), "applied:lost")
    s.query("runtime_recovery", ["later"])


@scenario(
    "REC-02-cluster-source-bounded-has-more-exact",
    "REC-02: the cluster source returns at most `limit` rows (default 16, at most 64) with "
    "an exact has_more and no persisted cursor: the same call returns the same first rows.",
    profile=Profile.CLUSTER,
)
def rec_02(s: Scenario) -> None:
    w = worker()
    for i in range(1, 4):
        s.launched(f"r{i}", w, NO_BACKOFF)
        s.tick(10)
    s.tick(LEASE_MS)
    s.query("runtime_recovery", ["r1", "r2"], limit=2, has_more=True)
    s.query("runtime_recovery", ["r1", "r2"], limit=2, has_more=True)
    s.query("runtime_recovery", ["r1", "r2", "r3"], limit=3)


@scenario(
    "REC-03-expired-without-evidence-stays-unchanged",
    "REC-03: on cluster an expired started Attempt without trusted not-running evidence stays "
    "unchanged: expiry and recovery without evidence are Replayed(evidence_required), unknown "
    "evidence is rejected with its reason, live evidence adopts; nothing is written. (The "
    "reselection by the cluster source is the -reselected- trace.)",
    profile=Profile.CLUSTER,
)
def rec_03(s: Scenario) -> None:
    w = worker()
    aid = s.launched("r1", w, NO_BACKOFF)
    s.tick(LEASE_MS)
    s.expire("r1", aid, expect="replayed:evidence_required")
    s.do(RecoverRuntime("r1", aid, None), "replayed:evidence_required")
    s.do(RecoverRuntime("r1", aid, UnknownEvidence(UnknownReason.PROBE_FAILED)), "rejected")
    s.do(RecoverRuntime("r1", aid, LiveEvidence()), "replayed:live")
    s.tick(LEASE_MS)
    s.do(RecoverRuntime("r1", aid, None), "replayed:evidence_required")
    assert s.agg("r1").run.status.value == "running"


@scenario(
    "REC-03-expired-without-evidence-reselected-by-cluster-source",
    "REC-03: the cluster source selects the expired started Attempt again in every cycle until "
    "trusted evidence resolves it; after not-running evidence it is lost and no longer selected.",
    profile=Profile.CLUSTER,
)
def rec_03_source(s: Scenario) -> None:
    w = worker()
    aid = s.launched("r1", w, NO_BACKOFF)
    s.tick(LEASE_MS)
    s.query("runtime_recovery", ["r1"])
    s.do(RecoverRuntime("r1", aid, None), "replayed:evidence_required")
    s.do(RecoverRuntime("r1", aid, UnknownEvidence(UnknownReason.PROBE_FAILED)), "rejected")
    s.tick(1_000)
    s.query("runtime_recovery", ["r1"])
    s.do(RecoverRuntime("r1", aid, NotRunningEvidence()), "applied:lost")
    s.query("runtime_recovery", [])


@scenario(
    "REC-04-recovery-lost-releases-the-lease",
    "REC-04: recovery that writes lost also releases the lease (lease_expired, version + 1), "
    "mirrored on the Attempt, in the same transaction; no leased row remains.",
    profile=Profile.CLUSTER,
)
def rec_04(s: Scenario) -> None:
    w = worker()
    aid = s.launched("r1", w, NO_BACKOFF)
    s.tick(LEASE_MS)
    recover = RecoverRuntime("r1", aid, NotRunningEvidence())
    s.all_faults(recover)
    s.do(recover, "applied:lost")
    assert s.agg("r1").leased_lease(aid) is None


@scenario(
    "REC-05-no-matching-lease-no-lease-write",
    "REC-05: when no leased row matches (the lease was already released by expiry), recovery "
    "writes lost without creating or modifying any lease row.",
    profile=Profile.CLUSTER,
)
def rec_05(s: Scenario) -> None:
    w = worker()
    aid = s.launched("r1", w, NO_BACKOFF)
    s.do(RequestCancel("r1", CancelReason.USER, Actor.USER), "applied")
    s.tick(LEASE_MS)
    s.expire("r1", aid, expect="applied:released")
    before = list(s.agg("r1").leases)
    s.do(RecoverRuntime("r1", aid, NotRunningEvidence()), "applied:lost")
    assert list(s.agg("r1").leases) == before


@scenario(
    "REC-06-recovery-candidate-in-lock-order",
    "REC-06: a cluster recovery candidate processed as one transaction (advisory lock, Run, "
    "Attempt, lease). The trace fixes the result; the cluster runner's statement log proves "
    "the lock order.",
    profile=Profile.CLUSTER,
)
def rec_06(s: Scenario) -> None:
    w = worker()
    aid = s.launched("r1", w, NO_BACKOFF)
    s.tick(LEASE_MS)
    s.query("runtime_recovery", ["r1"])
    s.do(RecoverRuntime("r1", aid, NotRunningEvidence()), "applied:lost")
    s.lost_retry_page({"scanned": 1, "scheduled": 1}, fail_closed=True)


def workflow_and_ordinary(s: Scenario) -> None:
    """An ordinary and a Workflow local Run running, and a Workflow remote Run whose lease ran
    out while starting."""
    w = worker()
    local_running(s, "ordinary")
    local_running(s, "wf-local", kind=RunKind.WORKFLOW)
    aid = s.admit("wf-remote", NO_BACKOFF, kind=RunKind.WORKFLOW)
    s.grant("wf-remote", aid, w)
    s.starting("wf-remote", aid, w)
    s.tick(LEASE_MS)


@scenario(
    "REC-07-workflow-runs-never-selected-by-local-startup",
    "REC-07: ordinary local startup recovery never selects a Workflow aggregate Run, even one "
    "with a started local Attempt; the ordinary Run is selected.",
)
def rec_07(s: Scenario) -> None:
    workflow_and_ordinary(s)
    s.query("local_startup", ["ordinary"])
    s.reopen()
    s.query("local_startup", ["ordinary"], limit=1)


@scenario(
    "REC-07-workflow-runs-never-selected-by-cluster-source",
    "REC-07: the cluster runtime recovery source never selects a Workflow aggregate Run, even "
    "one whose lease expired while starting; the ordinary started Run without a lease is.",
    profile=Profile.CLUSTER,
)
def rec_07_cluster(s: Scenario) -> None:
    workflow_and_ordinary(s)
    s.query("runtime_recovery", ["ordinary"])


@scenario(
    "REC-09-startup-recovery-then-lost-retry-page",
    "REC-09: at startup, local recovery resolves the interrupted local Attempt first (not "
    "running: lost), then the first execution-control lost-retry page takes it, before any "
    "scheduling. The trace fixes that order; the runtime's startup test checks the scheduler.",
)
def rec_09(s: Scenario) -> None:
    aid = local_running(s, "r1")
    s.reopen()
    s.tick(5_000)
    s.query("local_startup", ["r1"])
    s.do(RecoverLocalStartup("r1", aid, NotRunningEvidence()), "applied:lost")
    s.query("local_startup", [])
    s.lost_retry_page({"scanned": 1, "scheduled": 1})
    s.lost_retry_page({"scanned": 1, "requeued": 1})


@scenario(
    "REC-12-orphaned-created-failed-by-local-startup",
    "REC-12: local startup fails a created Run older than the process with "
    "RUN_ORPHANED_CREATED; a Run created after the process started is left alone.",
)
def rec_12(s: Scenario) -> None:
    s.do(CreateRun("old", "project", "task", 1, "shell"), "applied")
    s.tick(1_000)
    started = s.now
    s.tick(1)
    s.do(CreateRun("new", "project", "task", 1, "shell"), "applied")
    s.query("orphaned_created", ["old"], process_started_at_ms=started)
    s.do(FailOrphanedCreated("old", started), "applied")
    s.do(FailOrphanedCreated("new", started), "raced:NOT_ELIGIBLE")
    s.query("orphaned_created", [], process_started_at_ms=started)
    assert s.agg("old").run.error_code == "RUN_ORPHANED_CREATED"


@scenario(
    "REC-12-cluster-source-never-selects-created-runs",
    "REC-12: the cluster runtime recovery source never selects a created Run, however old.",
    profile=Profile.CLUSTER,
)
def rec_12_cluster(s: Scenario) -> None:
    s.do(CreateRun("old", "project", "task", 1, "shell"), "applied")
    s.tick(10 * LEASE_MS)
    s.query("runtime_recovery", [])


@scenario(
    "REC-13-recovery-error-stops-the-cluster-cycle",
    "REC-13: in a cluster cycle a candidate error fails the page closed "
    "(LOST_RETRY_UNAVAILABLE) and leaves the later candidates untouched; the cycle stops "
    "there (the cluster runner's cycle test checks that no scheduling follows).",
    profile=Profile.CLUSTER,
)
def rec_13(s: Scenario) -> None:
    w = worker()
    for i in range(1, 3):
        aid = s.launched(f"r{i}", w, NO_BACKOFF)
        s.tick(LEASE_MS)
        s.do(RecoverRuntime(f"r{i}", aid, NotRunningEvidence()), "applied:lost")
    s.lost_retry_page({"scanned": 0}, fail_closed=True, fail_candidate=1, expect_kind="error")
    s.lost_retry_page({"scanned": 2, "scheduled": 2}, fail_closed=True)


def _two_lost_one_colliding(s: Scenario) -> None:
    """r1's requeue with suffix `a1` would create `r1-a1`, its own first Attempt's id; r2's
    first Attempt has another id, so its requeue is fine."""
    w = worker()
    s.launched("r1", w, NO_BACKOFF)
    s.tick(1)
    aid = s.admit("r2", NO_BACKOFF, attempt_id="r2-first")
    s.grant("r2", aid, w)
    s.starting("r2", aid, w)
    s.running("r2", aid, w)
    s.tick(LEASE_MS)
    for run_id in ("r1", "r2"):
        latest = s.agg(run_id).latest_attempt
        assert latest is not None
        s.do(RecoverRuntime(run_id, latest.attempt_id, NotRunningEvidence()), "applied:lost")
        s.tick(1)


@scenario(
    "RUN-04-nothing-applies-before-a-recorded-start-time",
    "RUN-04 with Appendix E-4 (V-5): a start time is a handle fact the executor reports, so it "
    "can be later than the transaction that recorded it (r1's handle says it started 1 s after "
    "it was recorded). Before that start, a cancellation request and a completion receipt are "
    "CLOCK_REGRESSION and write nothing, though they come after the Run's last change; at the "
    "start they apply.",
)
def e_4_start_time(s: Scenario) -> None:
    aid = s.admit("r1", NO_BACKOFF, executor=LOCAL)
    s.do(ActivateLocal("r1", aid, LOCAL, 1, CALLBACK), "applied")
    started = s.now + 1_000
    s.do(RecordLocalHandle("r1", aid, "pid:r1", started), "applied")
    s.tick(1)
    s.do(RequestCancel("r1", CancelReason.USER, Actor.USER), "rejected:CLOCK_REGRESSION")
    s.tick(500)
    s.do(_receipt(s, "r1", CompletionOutcome.SUCCEEDED), "rejected:CLOCK_REGRESSION")
    s.now = started
    s.do(_receipt(s, "r1", CompletionOutcome.SUCCEEDED), "applied:completed")


@scenario(
    "RETRY-17-attempt-id-conflict-stops-the-cluster-page",
    "RETRY-17 with Appendix E-5: on cluster a candidate whose new Attempt id collides "
    "(ATTEMPT_ID_CONFLICT) stops the lost-retry page like any other failure "
    "(LOST_RETRY_UNAVAILABLE, nothing counted errored) and the later candidate is untouched; "
    "the next page, with fresh ids, requeues both.",
    profile=Profile.CLUSTER,
)
def e_5_cluster(s: Scenario) -> None:
    _two_lost_one_colliding(s)
    s.lost_retry_page({"scanned": 2, "scheduled": 2}, fail_closed=True)  # R4, due at once
    s.lost_retry_page(
        {"scanned": 0, "errored": 0}, fail_closed=True, attempt_suffix="a1", expect_kind="error"
    )
    assert s.agg("r2").run.status.value == "retry_wait"
    s.lost_retry_page({"scanned": 2, "requeued": 2, "errored": 0}, fail_closed=True)


@scenario(
    "RETRY-17-attempt-id-conflict-counted-errored-on-a-local-page",
    "RETRY-17 with Appendix E-5, the local side: a candidate whose new Attempt id collides is "
    "counted errored and left unchanged, and the page goes on to requeue the next one.",
)
def e_5_local(s: Scenario) -> None:
    _two_lost_one_colliding(s)
    s.lost_retry_page({"scanned": 2, "scheduled": 2})  # R4, due at once
    s.lost_retry_page({"scanned": 2, "errored": 1, "requeued": 1}, attempt_suffix="a1")
    assert s.agg("r1").run.status.value == "retry_wait"
    assert s.agg("r2").run.status.value == "queued"


@scenario(
    "RETRY-20-due-check-uses-observation-time",
    "RETRY-20: the due check uses the step's observation time, which on PostgreSQL is the "
    "database's clock: a Run due one millisecond later is not requeued, whatever a runner's own "
    "clock says (the cluster runner injects this time through its clock port).",
    profile=Profile.CLUSTER,
)
def retry_20(s: Scenario) -> None:
    w = worker()
    aid = s.launched("r1", w, BACKOFF)
    s.tick(LEASE_MS)
    s.do(RecoverRuntime("r1", aid, NotRunningEvidence()), "applied:lost")
    s.lost_retry_page({"scanned": 1, "scheduled": 1}, fail_closed=True)
    policy = s.agg("r1").policy
    assert policy is not None
    assert policy.next_attempt_at_ms is not None
    s.now = policy.next_attempt_at_ms - 1
    s.lost_retry_page({"scanned": 0}, fail_closed=True)
    s.now = policy.next_attempt_at_ms
    s.lost_retry_page({"scanned": 1, "requeued": 1}, fail_closed=True)


# -- project decisions on the local path ---------------------------------------------------------
def _receipt(s: Scenario, run_id: str, outcome: CompletionOutcome) -> CompleteLocal:
    attempt = s.agg(run_id).latest_attempt
    assert attempt is not None
    assert attempt.started_at_ms is not None
    receipt = LocalReceipt(
        run_id,
        attempt.attempt_id,
        attempt.callback_sequence,
        CALLBACK,
        outcome,
        attempt.started_at_ms,
        -15 if outcome is not CompletionOutcome.SUCCEEDED else 0,
    )
    return CompleteLocal(run_id, attempt.attempt_id, receipt)


@scenario(
    "RETRY-11-local-completion-under-an-intent-ends-with-the-intent",
    "RETRY-11 (an intent ends the Run cancelled or timed_out) for a local completion, decision "
    "R-27 (L3, §2.1): a local child stopped under an intent whose L4/L5 record a crash "
    "lost leaves a failed receipt (exit -15). Applied by execution control (r1: user intent) or "
    "by startup recovery after a restart (r2: timeout intent), it ends Attempt and Run with the "
    "intent's status, cancelled or timed_out, keeping the exit code; a succeeded receipt under "
    "an intent (r3) and a failed one without (r4) keep their own outcome. Without the crash "
    "(r5) the stop is recorded (L5) and the later receipt only replays.",
)
def r_27(s: Scenario) -> None:
    for run_id in ("r1", "r2", "r3", "r4", "r5"):
        local_running(s, run_id)
    s.tick(1)
    s.do(RequestCancel("r1", CancelReason.USER, Actor.USER), "applied")
    s.do(RequestCancel("r2", CancelReason.TIMEOUT, Actor.SYSTEM), "applied")
    s.do(RequestCancel("r3", CancelReason.USER, Actor.USER), "applied")
    s.do(RequestCancel("r5", CancelReason.USER, Actor.USER), "applied")
    s.tick(1)
    # The path without a crash: the stop is recorded (L5) and the later receipt only replays.
    r5 = s.agg("r5").latest_attempt
    assert r5 is not None
    s.do(RecordLocalStop("r5", r5.attempt_id, StopResult.TERMINATION_REQUESTED), "applied:stopped")
    s.do(_receipt(s, "r5", CompletionOutcome.FAILED), "replayed:already_terminal")
    s.do(_receipt(s, "r1", CompletionOutcome.FAILED), "applied:completed")
    s.do(_receipt(s, "r3", CompletionOutcome.SUCCEEDED), "applied:completed")
    s.do(_receipt(s, "r4", CompletionOutcome.FAILED), "applied:completed")
    s.reopen()  # the crash: r2's stop happened, its record did not
    s.tick(1)
    attempt = s.agg("r2").latest_attempt
    assert attempt is not None
    evidence = CompletedEvidence(
        CompletionOutcome.FAILED, attempt.callback_sequence, -15, attempt.started_at_ms
    )
    s.do(RecoverLocalStartup("r2", attempt.attempt_id, evidence), "applied:completed")
    finals = {r: s.agg(r).run.status.value for r in ("r1", "r2", "r3", "r4", "r5")}
    assert finals == {
        "r1": "cancelled",
        "r2": "timed_out",
        "r3": "succeeded",
        "r4": "failed",
        "r5": "cancelled",
    }
    assert all(s.agg(r).attempts[-1].exit_code == -15 for r in ("r1", "r2", "r4"))


# -- Appendix E (binding decisions of the second review) -----------------------------------------
@scenario(
    "E-1-cancel-after-lease-expiry-converges-cancelled",
    "E-1: cancel while running (r1, user) and while starting (r2, timeout); the leases expire "
    "and T9 only releases them; the next convergence selects both (and not r3, whose lease is "
    "still live) and ends each in one transaction: Attempt and Run cancelled (timed_out for the "
    "timeout intent), run.cancelled / run.timed_out with stop_unverified true, no new Attempt. "
    "A crash or an I/O error at any statement of that transaction writes nothing. The old "
    "Worker's later completion is refused by the fence (the lease is released).",
)
def e_1(s: Scenario) -> None:
    w = worker()
    a1 = s.launched("r1", w, NO_BACKOFF)
    a2 = s.admit("r2", NO_BACKOFF)
    s.grant("r2", a2, w)
    s.starting("r2", a2, w)
    a3 = s.launched("r3", w, None)
    s.do(RequestCancel("r1", CancelReason.USER, Actor.USER), "applied")
    s.tick(1)
    s.do(RequestCancel("r2", CancelReason.TIMEOUT, Actor.SYSTEM), "applied")
    s.tick(1)
    s.do(RequestCancel("r3", CancelReason.USER, Actor.USER), "applied")
    f1 = s.fence("r1", a1, w)
    f2 = s.fence("r2", a2, w)
    s.query("cancel_convergence", [])
    s.do(ConvergeCancel("r1"), "rejected:LIVE_EXECUTION")
    s.tick(LEASE_MS - 3)
    s.renew("r3", a3, w)
    s.tick(1)
    # Expired but not yet released: still a live execution.
    s.query("cancel_convergence", [])
    s.do(ConvergeCancel("r1"), "rejected:LIVE_EXECUTION")
    s.expire("r1", a1, expect="applied:released")  # T9
    s.expire("r2", a2, expect="applied:released")  # T9
    assert s.agg("r1").run.status.value == "running"
    assert s.agg("r2").run.status.value == "dispatching"
    s.tick(1)
    s.query("cancel_convergence", ["r1"], limit=1, has_more=True)
    s.query("cancel_convergence", ["r1", "r2"])
    s.all_faults(ConvergeCancel("r1"))
    s.do(ConvergeCancel("r1"), "applied:converged")
    s.do(ConvergeCancel("r2"), "applied:converged", fault=CRASH_AFTER)
    s.do(ConvergeCancel("r2"), "replayed:already_terminal")
    s.query("cancel_convergence", [])
    s.tick(1)
    late = s.completion("r1", a1, w, f1, outcome=CompletionOutcome.CANCELLED, exit_code=None)
    s.do(late, "rejected:LEASE_NOT_LEASED")
    timed_out = s.completion("r2", a2, w, f2, outcome=CompletionOutcome.TIMED_OUT, exit_code=None)
    s.do(timed_out, "rejected:LEASE_NOT_LEASED")
    s.do(RenewLease("r1", a1, f1, w, LEASE_MS), "rejected:LEASE_NOT_LEASED")
    for run_id, final in (("r1", "cancelled"), ("r2", "timed_out")):
        agg = s.agg(run_id)
        assert agg.run.status.value == final
        assert [a.status.value for a in agg.attempts] == [final]
    assert s.agg("r3").run.status.value == "running"


@scenario(
    "E-1-cluster-revoked-run-converges-without-evidence",
    "E-1 on cluster (D-6): cancel while running; the lease expires and is released (T9); the "
    "runtime recovery source still selects the started Attempt and, without evidence, leaves it "
    "(evidence_required); the cancellation convergence that follows in the same cycle ends it "
    "cancelled with stop_unverified true; recovery no longer selects it and the old Worker's "
    "completion is refused by the fence.",
    profile=Profile.CLUSTER,
)
def e_1_cluster(s: Scenario) -> None:
    w = worker()
    aid = s.launched("r1", w, NO_BACKOFF)
    s.do(RequestCancel("r1", CancelReason.USER, Actor.USER), "applied")
    fence = s.fence("r1", aid, w)
    s.tick(LEASE_MS)
    s.expire("r1", aid, expect="applied:released")  # T9
    s.query("runtime_recovery", ["r1"])
    s.do(RecoverRuntime("r1", aid, None), "replayed:evidence_required")
    s.lost_retry_page({"scanned": 0}, fail_closed=True)
    s.query("cancel_convergence", ["r1"])
    s.do(ConvergeCancel("r1"), "applied:converged")
    s.query("runtime_recovery", [])
    s.query("cancel_convergence", [])
    s.do(s.completion("r1", aid, w, fence), "rejected:LEASE_NOT_LEASED")
    agg = s.agg("r1")
    assert agg.run.status.value == "cancelled"
    assert [a.status.value for a in agg.attempts] == ["cancelled"]


@scenario(
    "E-1-cluster-lost-run-with-intent-converges-cancelled",
    "E-1 on cluster, D-6: cancel while running; the lease expires and §2.3 runtime recovery, "
    "with not-running evidence, makes the Attempt and the Run lost (recovery does not exclude an "
    "intent); the lost-retry page of the same cycle never selects a Run with intent, so before "
    "D-6 the Run stayed lost forever; the cancellation-convergence page that follows lost retry "
    "selects it and converge_cancel ends the Run cancelled (the lost Attempt stays lost, no new "
    "Attempt is created); a second page finds nothing.",
    profile=Profile.CLUSTER,
)
def d_6_cluster_lost(s: Scenario) -> None:
    w = worker()
    aid = s.launched("r1", w, NO_BACKOFF)
    s.do(RequestCancel("r1", CancelReason.USER, Actor.USER), "applied")
    s.tick(LEASE_MS + 1)
    s.query("runtime_recovery", ["r1"])
    s.do(RecoverRuntime("r1", aid, NotRunningEvidence()), "applied:lost")
    s.lost_retry_page({"scanned": 0}, fail_closed=True)
    s.query("cancel_convergence", ["r1"])
    s.do(ConvergeCancel("r1"), "applied:converged")
    s.lost_retry_page({"scanned": 0}, fail_closed=True)
    s.query("cancel_convergence", [])
    agg = s.agg("r1")
    assert agg.run.status.value == "cancelled"
    assert [a.status.value for a in agg.attempts] == ["lost"]


# -- issue 16 item 1: one trace per decision boundary of every candidate source, derived from
# the selection oracle (model_tests.corpus.boundaries; its coverage report names each one).
SCENARIOS.update(boundaries.scenarios())
SCENARIOS.update(write_boundaries.scenarios())  # every guarded write, likewise
SCENARIOS.update(expiry_scan.scenarios())  # the lease expiry scanner's page (INBOX-42)
