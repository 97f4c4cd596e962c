"""The property registry: every SPEC checklist id this project must test, with its owning issue.

Covers SPEC §1.12 (RUN, LEASE, RETRY), §2.6 (REC), §4.10 (WF-01..WF-18, registered for the
Workflow issue), §5.6 (AA-01..AA-15, the Approved Action issue), §6.5 (CAD), the Appendix D
additions (D-1 CAD-15,
D-16 CAD-16..18, RETRY-19..21, INBOX-43, INBOX-44, WF-19), the Appendix E decisions that ask for
a CONF trace (E-1; source "Appendix E": the appendix gives no bracketed source) and the redaction
rule S-1 of §0.4.

- `kind` is the SPEC's test kind set (§0.2): PBT (Hypothesis over the pure kernel), CONF
  (conformance against real storage) and LIFE (lifecycle with an injected clock).
- `source` is the bracketed source of the checklist item, verbatim (e.g. "ADR-0021 §5.5").
- `issue` is the project issue that must provide the passing test. The root `conftest.py` fails
  a full test run when an id with `issue <= CURRENT_ISSUE` has no passing
  `@pytest.mark.spec(id)` test.

Issue assignment: 2 = kernel + property tests (every item with PBT in §1.12/§2.6, CAD-11, CAD-12,
CAD-17, RETRY-19, S-1); 4 = edge runner and conformance (pure CONF items of §1.12/§2.6, CAD-16);
5 = cluster runner (REC-01, REC-02, REC-06, REC-13, RETRY-20, CAD-06, CAD-07, CAD-18; and E-1,
whose CONF trace runs on both runners); 6 = worker inbox (INBOX-*, CAD-15: receipts live there);
7 = lifecycles (the remaining CAD items, RETRY-21: the local dispatcher is assembled by the
dispatch phase); 8 = workflow (WF-19); 9 = Approved Actions (AA-01..AA-15, §5.6).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = ["CURRENT_ISSUE", "KINDS", "PROPERTIES", "Property", "required_ids"]

#: The issue being delivered now; `required_ids(CURRENT_ISSUE)` must all have passing tests.
CURRENT_ISSUE: Final = 9

#: The test kinds of SPEC §0.2.
KINDS: Final = frozenset({"PBT", "CONF", "LIFE"})


@dataclass(frozen=True, slots=True)
class Property:
    """One SPEC checklist item."""

    id: str
    kind: frozenset[str]
    statement: str
    source: str
    issue: int


def _p(pid: str, kind: str, source: str, issue: int, statement: str) -> Property:
    return Property(
        id=pid,
        kind=frozenset(kind.split("+")),
        statement=statement,
        source=source,
        issue=issue,
    )


_ALL: Final = (
    # -- §1.12 Run and Events -----------------------------------------------------------------
    _p("RUN-01", "PBT", "ADR-0021, ADR-0232", 2,
       "After every step of any random command sequence, invariants I-1..I-8 hold."),
    _p("RUN-02", "PBT+CONF", "ADR-0021 §5.5", 2,
       "No commands, replays or crashes yield two Attempts with the same (run_id, number) or a "
       "numbering gap."),
    _p("RUN-03", "PBT", "decision V-3", 2,
       "Each committed transition appends exactly its listed Events in order with gapless seq; "
       "a replay appends none."),
    _p("RUN-04", "PBT", "ADR-0229 §5", 2,
       "observed_at_ms earlier than a durable time it depends on gives "
       "Rejected(CLOCK_REGRESSION) and no change."),
    _p("RUN-05", "PBT", "§0.3", 2,
       "Every transition is total: Applied | Replayed | Rejected | Raced, never an exception "
       "for well-formed input."),
    _p("RUN-06", "CONF", "ADR-0021 §5.4, §5.5, ADR-0232 §2", 4,
       "A fault before commit at any statement leaves Run, Attempts, policy, leases and Events "
       "byte-for-byte unchanged."),
    _p("RUN-07", "PBT", "ADR-0380 §1", 2,
       "Both runners call the same kernel transition objects; every profile alias is the "
       "canonical function."),
    _p("RUN-08", "PBT", "ADR-0021 §5.5", 2,
       "Once an Attempt is lost (or terminal) none of its fields change."),
    # -- §1.12 Dispatch lease and fencing -------------------------------------------------------
    _p("LEASE-01", "PBT", "ADR-0232 §2, decision V-2", 2,
       "Every successful lease mutation adds exactly 1 to version; completed/released rows "
       "never change."),
    _p("LEASE-02", "PBT+CONF", "ADR-0021 §5.4, ADR-0232 §2", 2,
       "Any single mismatched fence field is rejected with that field's code and writes nothing."),
    _p("LEASE-03", "PBT+CONF", "ADR-0021 §5.2", 2,
       "An identical completion replay is Replayed(already_terminal) even offline or earlier; a "
       "changed sequence, outcome, exit code, fence or version is rejected."),
    _p("LEASE-04", "PBT", "ADR-0021 §5.2", 2,
       "A first completion with an offline Worker, replaced/expired session or expired lease "
       "is rejected."),
    _p("LEASE-05", "PBT", "ADR-0021 §5.4", 2,
       "expire_with_lease on a live, completed or released lease writes nothing."),
    _p("LEASE-06", "PBT", "ADR-0021 §5.4", 2,
       "Expiry of a claimed Attempt's lease releases it (lease_expired, version+1), Attempt "
       "stays claimed, next grant uses generation+1."),
    _p("LEASE-07", "PBT+CONF", "ADR-0021 §5.4, ADR-0232 §2", 2,
       "Local expiry of a starting/running Attempt commits lost + release in one transaction; "
       "with intent only the release."),
    _p("LEASE-08", "CONF", "ADR-0021 §5.4", 4,
       "Concurrent renew, completion and expiry end in a serially reachable state; completion "
       "and expiry never both apply."),
    _p("LEASE-09", "CONF", "ADR-0232 §2", 4,
       "After lost + release the old Worker's renew, starting/running ACK and completion fail "
       "the fence."),
    _p("LEASE-10", "CONF", "decision I-9", 4,
       "No control-plane table or log contains a raw lease token."),
    _p("LEASE-11", "PBT", "ADR-0232 §2", 2,
       "Attempt.lease_version equals the current lease version after every committed "
       "transaction."),
    _p("LEASE-12", "PBT", "decision E-1", 2,
       "On cluster, expire_with_lease never makes a starting/running Attempt lost."),
    # -- §1.12 Retry policy and lost retry ------------------------------------------------------
    _p("RETRY-01", "CONF", "ADR-0021 §5.5", 4,
       "A Run command carrying a retry policy is rejected before any row is written or process "
       "starts."),
    _p("RETRY-02", "CONF", "ADR-0021 verification", 4,
       "An enabled provider policy with safety unknown rejects admission; no Run, Attempt or "
       "policy row exists."),
    _p("RETRY-03", "PBT+CONF", "ADR-0380 §2 and acceptance, ADR-0232 §3", 2,
       "A lost Run with no policy, retry_on_lost false or max_attempts <= 1 fails with "
       "RUN_LOST_RETRY_DISABLED."),
    _p("RETRY-04", "PBT", "ADR-0380 §2", 2,
       "Stored safety unknown fails with RUN_LOST_RETRY_UNSAFE; precedence DISABLED, UNSAFE, "
       "EXHAUSTED."),
    _p("RETRY-05", "PBT", "ADR-0380 §2", 2,
       "A lost Run whose latest Attempt number >= max_attempts fails with "
       "RUN_LOST_RETRY_EXHAUSTED."),
    _p("RETRY-06", "PBT+CONF", "ADR-0021 §5.5, ADR-0380 acceptance", 2,
       "A retryable lost Run becomes retry_wait at base + delay, policy version+1, one "
       "run.retry_wait Event, no new Attempt."),
    _p("RETRY-07", "CONF", "ADR-0021 verification", 4,
       "A source never returns a retry_wait Run before its next_attempt_at_ms."),
    _p("RETRY-08", "PBT+CONF", "ADR-0021 §5.5, ADR-0232 §3", 2,
       "A due retry_wait Run gets exactly one bare claimed Attempt N+1, Run queued, policy "
       "cleared, run.queued then attempt.claimed; Attempt N unchanged."),
    _p("RETRY-09", "PBT+CONF", "ADR-0380 §2", 2,
       "Replaying any retry step never creates Attempt N+2; the replay is Raced or a no-op."),
    _p("RETRY-10", "CONF", "ADR-0021 verification", 4,
       "A fault at any statement of the requeue transaction rolls back Run, policy, new Attempt "
       "and both Events."),
    _p("RETRY-11", "PBT", "ADR-0021 verification", 2,
       "A cancellation intent set before the requeue commits prevents Attempt N+1; the Run ends "
       "cancelled (or timed_out)."),
    _p("RETRY-12", "CONF", "ADR-0380 §2, ADR-0232 §3", 4,
       "Workflow Runs, non-runtime Runs and Runs whose latest Attempt is not lost are never "
       "selected."),
    _p("RETRY-13", "CONF", "ADR-0380 acceptance, ADR-0021 verification", 4,
       "One call processes at most limit (<= 64) candidates, has_more is exact, no timer or "
       "further page."),
    _p("RETRY-14", "PBT", "ADR-0380 §2", 2,
       "Page counts satisfy scheduled + requeued + failed + raced + errored = scanned <= limit."),
    _p("RETRY-15", "CONF", "ADR-0380 §2", 4,
       "Within a page every lost candidate precedes every due retry_wait candidate."),
    _p("RETRY-16", "PBT", "decision 1.8.1", 2,
       "delay is non-decreasing in n, never exceeds backoff_max_ms, and is 0 when "
       "backoff_base_ms = 0."),
    _p("RETRY-17", "CONF", "ADR-0232 §3, ADR-0021 §5.5", 4,
       "Cluster: a candidate error stops the page; local: it is unchanged, counted errored, "
       "and the page continues."),
    _p("RETRY-18", "CONF", "ADR-0021 §5.5", 4,
       "Local activation accepts only the latest claimed Attempt of an uncancelled queued local "
       "Run; one spawn under concurrency."),
    # -- §2.6 Recovery --------------------------------------------------------------------------
    _p("REC-01", "CONF", "ADR-0232 §1", 5,
       "The cluster source returns exactly the §2.3 rows; never pristine claimed Attempts or "
       "created Runs."),
    _p("REC-02", "CONF", "ADR-0232 §1", 5,
       "The cluster source returns at most limit (<= 64, default 16) rows, exact has_more, no "
       "persisted cursor."),
    _p("REC-03", "PBT+CONF", "ADR-0232 §1", 2,
       "An expired starting/running Attempt without trusted not-running evidence stays "
       "unchanged and is reselected."),
    _p("REC-04", "CONF", "ADR-0232 §2", 4,
       "Recovery writing lost releases the lease (lease_expired, version+1), mirrored on the "
       "Attempt; no leased row remains."),
    _p("REC-05", "CONF", "ADR-0232 §2", 4,
       "With no lease row matching generation/version, recovery creates and modifies no lease."),
    _p("REC-06", "CONF", "ADR-0232 §2, §3", 5,
       "Per candidate lock order is advisory lock, Run, Attempt, lease."),
    _p("REC-07", "CONF", "ADR-0229 §3", 4,
       "Ordinary startup recovery and the cluster source never select a Workflow aggregate Run."),
    _p("REC-08", "PBT", "ADR-0021 §5.1, ADR-0229 §3", 2,
       "Evidence order is receipt then identity; live needs two consistent inspections of the "
       "persisted identity."),
    _p("REC-09", "CONF", "ADR-0380 §3", 4,
       "Startup recovery, then the first execution-control lost-retry page, finish before the "
       "scheduler's first cycle."),
    _p("REC-10", "PBT", "ADR-0021 §5.5, ADR-0232 §3", 2,
       "No recovery step inserts an Attempt or modifies a retry policy."),
    _p("REC-11", "PBT", "ADR-0232 §1", 2,
       "Re-running recovery on its own output is a no-op (idempotent)."),
    _p("REC-12", "CONF", "decision §2.2", 4,
       "Local startup fails an orphaned created Run (RUN_ORPHANED_CREATED); the cluster source "
       "never does."),
    _p("REC-13", "CONF", "ADR-0232 §4", 5,
       "A recovery error in a cluster cycle means no schedule, frontier or Task admission runs "
       "in that cycle."),
    # -- §6.5 Cadences, orderings and budgets ----------------------------------------------------
    _p("CAD-01", "CONF", "ADR-0380 §3", 7,
       "Locally, startup recovery completes before the first execution-control cycle, which "
       "precedes the scheduler's first."),
    _p("CAD-02", "LIFE", "ADR-0380 §3", 7,
       "Each execution-control cycle: completions, cancellation/deadline, one lost-retry page, "
       "slow-cycle cleanup."),
    _p("CAD-03", "LIFE", "ADR-0380 §3", 7,
       "An execution-control cycle handles at most 2 (edge) / 16 (standalone) lost-retry "
       "candidates at 5 s / 1 s."),
    _p("CAD-04", "LIFE", "ADR-0380 acceptance, ADR-0232 §4", 7,
       "Overlapping run_once() calls on any lifecycle give one cycle execution and one shared "
       "result."),
    _p("CAD-05", "LIFE", "ADR-0380 §3", 7,
       "A stop drain of execution control makes no lost-retry call."),
    _p("CAD-06", "LIFE", "ADR-0232 §4", 5,
       "Cluster cycle order: recovery, lost retry, schedule, frontier, admission; a failure in "
       "the first two skips the rest."),
    _p("CAD-07", "LIFE", "ADR-0232 §4", 5,
       "The cluster runtime coordinator holds no timer, pool, connection, cursor or per-Run "
       "state."),
    _p("CAD-08", "LIFE", "ADR-0229 §6", 7,
       "Local stop order is scheduler drain, execution-control drain, storage close."),
    _p("CAD-09", "CONF", "ADR-0380 acceptance, ADR-0232 §5", 7,
       "Exactly one timer per active lifecycle, none elsewhere; the local profile holds one "
       "SQLite connection."),
    _p("CAD-10", "CONF", "ADR-0232 §4, §5", 7,
       "Edge/standalone never import the PostgreSQL runner; cluster never builds a SQLite "
       "lifecycle."),
    _p("CAD-11", "PBT", "all", 2,
       "The kernel/specs budget data equals the §6.3 table; components reject configuration "
       "above the hard limits."),
    _p("CAD-12", "PBT", "all", 2,
       "For any backlog, one cycle or call of each component processes no more items than its "
       "budget."),
    _p("CAD-13", "LIFE", "ADR-0036 §4, decision L-rules", 7,
       "Every lifecycle satisfies L-1..L-9 (shared contract test)."),
    _p("CAD-14", "LIFE", "ADR-0380 §3, ADR-0232 §4", 7,
       "Only its lifecycle triggers lost retry: there is no second lost-retry cadence."),
    # -- §3.18 Worker execution offer inbox (issue 6) ------------------------------------------
    _p("INBOX-01", "PBT", "ADR-0021 §1, §2", 6,
       "Only the transitions of §3.6 occur; every other (state, trigger) pair is refused with "
       "the record unchanged."),
    _p("INBOX-02", "PBT+CONF", "ADR-0021 §3", 6,
       "Every durable revision satisfies the field-presence rules of §3.3; revisions grow by "
       "exactly one; a replace with a stale expected revision changes nothing."),
    _p("INBOX-03", "PBT", "ADR-0021 verification", 6,
       "The callback sequence and token digest are durable as a pair no later than the "
       "`launching` write and before `Executor.start()`; no journal byte sequence contains the "
       "raw callback token."),
    _p("INBOX-04", "PBT", "ADR-0021 verification", 6,
       "For any interleaving of concurrent and serial duplicate deliveries and crashes at any "
       "step, `Executor.start()` is called at most once per offer."),
    _p("INBOX-05", "PBT+CONF", "ADR-0021 §2", 6,
       "A restart that finds `launching` leads to `recovery_required(launch_outcome_unknown)` "
       "with zero Executor calls."),
    _p("INBOX-06", "PBT", "ADR-0021 §2", 6,
       "A restart or redelivery that finds `started` replays only the running ACK."),
    _p("INBOX-07", "PBT", "ADR-0021 §5", 6,
       "`running_acknowledged` answers redelivery with idempotent success and is never selected "
       "by retention."),
    _p("INBOX-08", "PBT", "ADR-0021 verification", 6,
       "After an explicit start refusal, `fail_start` can be replayed until "
       "`start_failure_acknowledged`, and the Executor is never called again."),
    _p("INBOX-09", "PBT", "ADR-0021 §3", 6,
       "A delivery reusing an `offer_id` with a different digest, Task revision, session, "
       "generation, lease generation, token or candidate is refused before any side effect."),
    _p("INBOX-10", "PBT", "ADR-0021 §3", 6,
       "A redelivery with a higher lease version updates only the stored lease; an equal or "
       "lower version writes nothing."),
    _p("INBOX-11", "PBT+CONF", "ADR-0021 §6", 6,
       "Deliveries with an expired Run lease, a replaced session, an offline Worker or an "
       "expired session lease are refused and no journal file is created."),
    _p("INBOX-12", "PBT", "ADR-0021 §6", 6,
       "While draining, `new_claim` is refused before the journal write, and a `lease_recovery` "
       "for an existing record of the same lease proceeds."),
    _p("INBOX-13", "PBT", "ADR-0021 §2, verification", 6,
       "When the control plane reports the Attempt already running or terminal and the journal "
       "lacks matching ownership, the record becomes `recovery_required` and nothing is spawned."),
    _p("INBOX-14", "PBT", "ADR-0021 §6", 6,
       "A version mismatch on running/failure ACK leads to at most 3 calls with refreshed "
       "versions and no busy loop."),
    _p("INBOX-15", "CONF", "ADR-0021 §4", 6,
       "Concurrent creates of one `offer_id` yield exactly one record; a crash injected at any "
       "step of create or replace leaves no partial file visible and, after restart, the last "
       "durable revision."),
    _p("INBOX-16", "CONF", "ADR-0021 §4", 6,
       "The root is `0700` and every record `0600`; a root with broader permissions or another "
       "owner is refused."),
    _p("INBOX-17", "CONF", "ADR-0021 §4", 6,
       "Creating beyond capacity fails with `JOURNAL_FULL` whatever the states of existing "
       "records; nothing is evicted; capacity above 1024 is rejected."),
    _p("INBOX-18", "CONF", "ADR-0021 §4", 6,
       "A record over 192 KiB is refused before any file is written."),
    _p("INBOX-19", "CONF", "ADR-0021 §4", 6,
       "Paging returns at most 64 records per page in ascending `offer_id` order; concatenated "
       "pages list every unchanged record exactly once."),
    _p("INBOX-20", "CONF", "ADR-0021 §4", 6,
       "Under concurrent creates of distinct offers the record count never exceeds capacity; a "
       "revision-conditional remove racing a replace has a deterministic result."),
    _p("INBOX-21", "CONF", "ADR-0021 §4", 6,
       "Without `acquire()` every operation fails; of two competing owners exactly one acquires; "
       "after `release()` the other can acquire."),
    _p("INBOX-22", "CONF", "ADR-0021 §4", 6,
       "Deleting the lock directory, changing its mtime, or delaying refresh beyond the window "
       "makes the old owner `compromised`; afterwards every operation fails and no re-acquire "
       "happens."),
    _p("INBOX-23", "CONF", "ADR-0021 §4", 6,
       "Stale window outside 5 s..5 min is rejected; refresh happens every half window; a lock "
       "older than the window can be reclaimed [decision W-3], a younger one cannot."),
    _p("INBOX-24", "CONF", "ADR-0021 §4", 6,
       "The adapter starts exactly one timer (refresh) and opens no database connection or "
       "watcher."),
    _p("INBOX-25", "PBT", "ADR-0021 §5", 6,
       "Every state (and every recovery reason) is classified as in U-4, and the result contains "
       "no token, command or ExecutionSpec."),
    _p("INBOX-26", "PBT", "ADR-0021 §5", 6,
       "Exhausted budgets and repeated, regressing, skipping or oversized cursor pages each fail "
       "with their code; no partial result is reported as complete."),
    _p("INBOX-27", "CONF", "ADR-0021 §5", 6,
       "Auditing leaves every journal file byte-identical and calls no ACK, Executor, stop or "
       "delete port."),
    _p("INBOX-28", "LIFE", "ADR-0021 §5", 6,
       "The inbox lifecycle runs acquire, audit, [recovery, re-audit], hold in that order; on "
       "any budget, corruption or audit error it releases ownership before refusing; it creates "
       "no timer and starts no transport."),
    _p("INBOX-29", "PBT", "ADR-0021 §5.1", 6,
       "With a valid receipt no process probe happens; after an `exited` probe the receipt is "
       "re-read, and re-read once more after a grace of at most 5 s."),
    _p("INBOX-30", "PBT", "ADR-0021 §5.1", 6,
       "A receipt with a Run, Attempt, start time, sequence or capability mismatch, an "
       "unavailable authenticator, or a read error yields `unknown` before any process probe."),
    _p("INBOX-31", "PBT", "ADR-0021 §5.1", 6,
       "A record without the callback pair never authenticates a receipt."),
    _p("INBOX-32", "PBT", "ADR-0021 §5.1", 6,
       "Each inspector outcome (`running`, `exited`, `invalid`, `identity_mismatch`, "
       "`unsupported`, error) maps to one stable evidence value, and no branch calls start, "
       "stop, ACK or remove."),
    _p("INBOX-33", "PBT", "ADR-0021 §5.1", 6,
       "With authority `session_fenced`, `worker_offline`, `worker_session_expired` or "
       "`run_lease_expired`, or a terminal control plane, completion is `blocked` and nothing is "
       "submitted, except the exact-replay case [decision §3.11]."),
    _p("INBOX-34", "PBT+CONF", "ADR-0021 §5.2", 6,
       "Completion recovery always submits first, writes `completion_acknowledged` second and "
       "deletes the receipt third; a failed journal write keeps the receipt and the next pass's "
       "identical resubmission returns `already_terminal`; a failed deletion never reverts the "
       "final state."),
    _p("INBOX-35", "CONF", "ADR-0021 §5.2", 6,
       "After the control plane committed a completion and the Worker was replaced before its "
       "journal write, recovery converges to `completion_acknowledged` through "
       "`already_terminal`; any altered resubmission is refused."),
    _p("INBOX-36", "PBT", "ADR-0021 §5.2", 6,
       "Running ACK recovery happens only for `started` + `current` + running identity + no "
       "receipt; a terminal control plane yields `recovery_required(control_plane_terminal)`; a "
       "version mismatch leaves the record unchanged."),
    _p("INBOX-37", "PBT", "ADR-0021 §5.3", 6,
       "An action count over budget or an incomplete audit causes zero side effects; one failing "
       "item does not stop the others and the overall result is `reconciliation_required`."),
    _p("INBOX-38", "PBT", "ADR-0021 §5.1, §5.2", 6,
       "No Reconciler, Coordinator or Supervisor result contains a receipt token, lease token, "
       "command or ExecutionSpec."),
    _p("INBOX-39", "CONF", "ADR-0021 §5.3", 6,
       "Retention deletes only `completion_acknowledged` and `start_failure_acknowledged` "
       "records older than the retention, receipts first, at most the delete budget per call; a "
       "concurrent replace, a failed receipt cleanup or an exhausted budget never deletes an "
       "active or newer record; retention outside 1 min..30 days is rejected."),
    _p("INBOX-40", "PBT", "ADR-0021 §5.4", 6,
       "The lease-loss coordinator stops a process only when the full authority matches the "
       "record; never after `completion_acknowledged`; writes `_unverified` when the identity "
       "cannot be re-verified; writes nothing when the controller raises."),
    _p("INBOX-41", "PBT", "ADR-0021 §5.4", 6,
       "Lease-lost records are never deleted by retention and never spawned by redelivery; the "
       "coordinator has no way to call a control-plane mutation."),
    _p("INBOX-42", "CONF", "ADR-0021 §5.4", 6,
       "The expiry scanner processes at most one page per call (default 16, hard 64) in "
       "`(expires_at_ms, attempt_id)` order; after a failure it returns the cursor of the "
       "contiguous successful prefix and the failed item is processed again next call."),
    # -- Appendix D additions ------------------------------------------------------------------
    # CAD-15 belongs with the receipts it protects (issue 6, docs/decisions.md E-4).
    _p("CAD-15", "CONF", "ADR-0380 §3", 6,
       "Slow-cycle cleanup never deletes the receipt of a non-terminal Attempt."),
    _p("CAD-16", "CONF", "ADR-0380 acceptance, ADR-0232 §5", 4,
       "The created schema equals §1.1; recovery and retry add no table, index or migration."),
    _p("CAD-17", "PBT", "ADR-0380 acceptance", 2,
       "kernel/ imports no sqlite3, psycopg, time, random, os or threading; edge imports nothing "
       "from runners/cluster."),
    _p("CAD-18", "CONF", "ADR-0232 §5", 5,
       "The Worker-ingress PostgreSQL role is denied writes on runs, attempts, policies and "
       "leases."),
    _p("INBOX-43", "CONF", "ADR-0021 verification", 6,
       "ENOSPC/EIO/EACCES at write, fsync, link or rename fail closed; prior revision intact, "
       "no partial file."),
    _p("INBOX-44", "PBT", "ADR-0021 §6", 6,
       "repr/str, logs and exception text never contain a token, command or ExecutionSpec; "
       "failures carry fixed codes."),
    _p("WF-01", "LIFE", "ADR-0229 §1", 8,
       "Every scheduler cycle calls the phases in the order cancellation, schedule, frontier, "
       "Task admission, dispatch."),
    _p("WF-02", "LIFE", "ADR-0229 §1", 8,
       "No phase exceeds its per-profile page size, page count or activation count (§4.2) for "
       "any backlog size."),
    _p("WF-03", "LIFE", "ADR-0229 §1", 8,
       "A failing phase creates no extra timer, watcher or retry loop, and the next cadence runs "
       "the cycle again."),
    _p("WF-04", "PBT", "ADR-0229 §2", 8,
       "A Task Attempt is dispatched only with its immutable ledger entry, its StepRun exactly "
       "`ready` at the ledger version, and a `running` parent."),
    _p("WF-05", "CONF", "ADR-0229 §2", 8,
       "A fault at any statement of a Task execution transaction leaves Attempt, StepRun, Run "
       "counters and Events unchanged; the parent Run remains `running` until the frontier "
       "aggregates."),
    _p("WF-06", "PBT", "ADR-0229 §2", 8,
       "With and without Workflow Runs present, ordinary Runs follow identical retry, completion "
       "and cancellation behaviour (differential test)."),
    _p("WF-07", "CONF", "ADR-0229 §3", 8,
       "Ordinary startup recovery selects no Workflow Run."),
    _p("WF-08", "PBT+CONF", "ADR-0229 §3", 8,
       "Workflow recovery turns an orphaned `claimed` Attempt into `lost` with a new `ready` "
       "StepRun epoch; uses a receipt first for `starting`/`running`; accepts \"live\" only after "
       "two consistent inspections; writes nothing on unknown; never finalizes the parent."),
    _p("WF-09", "PBT", "ADR-0229 §4", 8,
       "The portable regex accepts all UUIDv7 strings and all `wta:` IDs, and rejects empty "
       "strings, leading dots, `/`, `\\`, whitespace, NUL, non-ASCII and lengths over 36."),
    _p("WF-10", "PBT", "ADR-0229 §4", 8,
       "Task Attempt IDs are deterministic: equal admission inputs give equal IDs, a different "
       "StepRun version gives a different ID, and every ID is `wta:` + 32 lowercase hex."),
    _p("WF-11", "PBT", "ADR-0229 §5", 8,
       "Stored `started_at_ms` equals the handle's value; a receipt written with that value is "
       "accepted, never quarantined."),
    _p("WF-12", "PBT", "ADR-0229 §5", 8,
       "An Event time earlier than its Run or Attempt creation, or a clock regression, is "
       "rejected without writing."),
    _p("WF-13", "LIFE", "ADR-0229 §6", 8,
       "Stop runs scheduler drain, then execution-control drain, then storage close; concurrent "
       "stops share one result; no admission or Attempt is created after stop begins."),
    _p("WF-14", "CONF", "ADR-0229 verification", 8,
       "A two-step Workflow ends with both steps succeeded, exactly one Attempt per step, "
       "exactly two admissions and no duplicate dispatch."),
    _p("WF-15", "CONF", "ADR-0229 verification", 8,
       "A Workflow cancelled before startup converges to `cancelled` in the first cadence, "
       "without starting any Attempt, and ordinary recovery scans 0 rows."),
    _p("WF-16", "CONF", "ADR-0229 verification", 8,
       "Cancelling a Workflow with a running Task stops the process before the Attempt, all "
       "StepRuns and the parent become `cancelled`."),
    _p("WF-17", "CONF", "ADR-0229 verification", 8,
       "For a kill at any step followed by reopen and replay (edge and standalone budgets, "
       "admission and conclusive-stop/control-terminal scenarios), the final state equals the "
       "no-crash state: no duplicate admission, Attempt or dispatch."),
    _p("WF-18", "CONF", "ADR-0229 verification", 8,
       "Losing the response of a completion or of the parent convergence and replaying it is "
       "idempotent, including after a database failover on the cluster runner."),
    _p("WF-19", "CONF", "ADR-0229 §7", 8,
       "On PostgreSQL, Task Attempt admission is atomic and its exact replay returns the "
       "existing entry."),
    # -- §5.6 Approved Action supervisor and lifecycle (issue 19) ---------------------------
    _p("AA-01", "LIFE", "ADR-0036 §1", 9,
       "In every cycle the recovery phase runs before the dispatch phase; when recovery "
       "listing or reading fails, the dispatcher is called 0 times."),
    _p("AA-02", "LIFE", "ADR-0036 §1", 9,
       "The two phases never overlap in time."),
    _p("AA-03", "PBT", "ADR-0036 §2", 9,
       "Page size outside 1..64 or max pages outside 1..64 is rejected at construction."),
    _p("AA-04", "PBT", "ADR-0036 §2", 9,
       "A truncated page with a strictly advancing cursor leads to the next page; a missing "
       "or non-advancing cursor stops the phase with `cursor_stalled` and `remaining = "
       "true`."),
    _p("AA-05", "LIFE", "ADR-0036 §2", 9,
       "Reaching max pages stops with `page_limit` and the next cursor; the next cycle "
       "resumes from it; a complete cycle clears the resume cursor."),
    _p("AA-06", "LIFE", "ADR-0036 §2", 9,
       "A failed cycle leaves the resume cursors unchanged, and the next cycle starts from "
       "the same boundary."),
    _p("AA-07", "PBT", "ADR-0036 §2", 9,
       "Phase summaries contain only the fixed numeric fields, `stop_reason` and "
       "`remaining`; no lists, text or evidence."),
    _p("AA-08", "PBT", "ADR-0036 §3", 9,
       "The edge and standalone policies equal the table in §5.4 and differ from each other; "
       "a returned policy is a deep copy."),
    _p("AA-09", "PBT", "ADR-0036 §5", 9,
       "Requesting the policy for `cluster` or `worker` fails before any configuration is "
       "read."),
    _p("AA-10", "LIFE", "ADR-0036 §4", 9,
       "After construction no timer exists; repeated `start()` schedules one timer."),
    _p("AA-11", "LIFE", "ADR-0036 §4", 9,
       "A cycle slower than the interval is never overlapped; the next timer is created only "
       "after settlement and does not keep the process alive."),
    _p("AA-12", "LIFE", "ADR-0036 §4", 9,
       "`stop()` cancels a pending timer immediately and returns within the stop timeout "
       "even when the in-flight cycle hangs."),
    _p("AA-13", "LIFE", "ADR-0036 §4", 9,
       "A metrics or diagnostic callback that raises does not fail the cycle and does not "
       "cause an immediate re-run."),
    _p("AA-14", "PBT", "ADR-0036 §4", 9,
       "Intervals below 250 ms or above 24 h and stop timeouts above 60 s are rejected."),
    _p("AA-15", "CONF", "ADR-0036 §6", 9,
       "Importing the application modules and building the default application does not "
       "construct or start the Approved Action lifecycle."),
    _p("RETRY-19", "PBT", "ADR-0380 §4", 2,
       "Lost-retry Events use actor reconciler; nothing is typed as manual recovery."),
    _p("RETRY-20", "CONF", "ADR-0232 §3", 5,
       "On PostgreSQL the due check uses database time: with the runner clock ahead, a not-due "
       "Run is not requeued."),
    # RETRY-21 belongs with the dispatch phase that assembles the dispatcher (issue 7, E-4).
    _p("RETRY-21", "PBT", "ADR-0021 §5.5", 7,
       "The local dispatcher deep-copies the ExecutionSpec and rejects a non-advancing cursor."),
    # -- Appendix E (binding decisions of the second review) that name a CONF trace ----------
    # E-1 closes decision R-2; its trace runs on both runners, so it is the cluster runner's
    # issue (5), the first at which both runners exist.
    _p("E-1", "CONF", "Appendix E", 5,
       "A Run with an intent whose started remote Attempt's lease expired (T9) converges to "
       "cancelled/timed_out in one transaction, stop_unverified; no Attempt is created."),
    # E-7 asks for no test kind (it is a rule every `qlk` command obeys); it is registered, like
    # S-1, so that the tests of the exit-code contract cite it. The CLI became a person's tool
    # with the local application (issue 7).
    # E-2 names no test kind either; registered so that the journal lock's tests cite it (the
    # kernel's liveness rule and the adapter's SIGKILL tests). It amends W-3 (B-48/D-10), whose
    # properties (INBOX-23) belong to the inbox issue, so it does too.
    _p("E-2", "PBT", "Appendix E", 6,
       "A journal lock whose owner is provably dead (another boot id; same boot id and no such "
       "PID or another start time) is reclaimed at once, by rename and D-10's checks."),
    _p("E-7", "CONF", "Appendix E", 7,
       "Every qlk command exits 0 / 1 check failed / 2 usage or bad input / 3 runtime or "
       "infrastructure / 130 interrupted; a user error is one line naming the file or flag."),
    # -- §0.4 Redaction rule ---------------------------------------------------------------------
    _p("S-1", "PBT", "§0.4", 2,
       "No raw token, command line or ExecutionSpec appears in results, Events, errors, logs, "
       "traces or repr()."),
)  # fmt: skip

#: Every registered property by id (read-only).
PROPERTIES: Final[Mapping[str, Property]] = MappingProxyType({p.id: p for p in _ALL})


def required_ids(up_to_issue: int) -> frozenset[str]:
    """The ids whose passing tests are due by issue `up_to_issue` (inclusive)."""
    return frozenset(pid for pid, prop in PROPERTIES.items() if prop.issue <= up_to_issue)
