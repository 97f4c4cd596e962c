"""Planted-bug variants of the edge SQLite runner (issue 4 item 6; issue 16 item 2: the runner
mutation tier).

Each mutant is one realistic, small bug of the edge runner, made by an exact edit of its real
source text (`tests/support/runner_mutants.py`): a named SQL section of `runners/edge/sql/*.sql`
as the runner looks it up at execution time (`runners.edge.store.STATEMENTS` for loads and
writes, `runners.edge.sources.SOURCES` for the candidate sources), or a method of
`runners/edge/store.py` / `runners/edge/connection.py`. `modes` names the parts of `qlk conform`
that must each catch it, `boundary` the trace or check that does.

The kinds issue 16 names, on this runner: comparisons flipped at exactly-equal times, `LIMIT
:limit` instead of `:limit + 1`, a wrong keyset tie-break, an exclusion dropped from a source's
WHERE (owner, cancellation intent, Workflow kind, executor type), a guard column dropped from an
UPDATE, a dropped Event append, a commit in the middle of a write, and the missing write lock
(`BEGIN DEFERRED` for `BEGIN IMMEDIATE`, the edge runner's lock: D-2). A draining Worker is the
kernel's exclusion (the grant's fence), not a runner's: no edge statement reads Worker sessions.
"""

from __future__ import annotations

from collections.abc import Mapping

from tests.support.runner_mutants import MethodEdit, RunnerMutant, SqlEdit

STORE = "runners.edge.store"
SOURCES = "runners.edge.sources"
CONNECTION = "runners.edge.connection"


def _write(section: str, old: str, new: str) -> SqlEdit:
    return SqlEdit(STORE, "STATEMENTS", section, old, new)


def _source(section: str, old: str, new: str) -> SqlEdit:
    return SqlEdit(SOURCES, "SOURCES", section, old, new)


#: `EdgeTransaction.execute`'s body, the text the Event and split-commit mutants edit.
_EXECUTE = "name, params = workflow_effect_statement(effect)\n        self._write(name, params)"


def _edge(
    name: str,
    kind: str,
    breaks: str,
    edit: SqlEdit | MethodEdit,
    boundary: str,
    *,
    modes: tuple[str, ...] = ("corpus",),
    hints: tuple[str, ...] = (),
    guard: tuple[str, str] | None = None,
) -> RunnerMutant:
    return RunnerMutant(name, "edge", kind, breaks, (edit,), boundary, modes, hints, guard)


MUTANTS: tuple[RunnerMutant, ...] = (
    # -- guard columns dropped from an UPDATE's WHERE (guard mode) ---------------------------
    _edge(
        "update_run_no_version_cas",
        "guard",
        "V-1: the Run version CAS dropped from update_run's WHERE (lost update)",
        _write(
            "update_run",
            "WHERE run_id = :run_id\n  AND version = :expected_version;",
            "WHERE run_id = :run_id;",
        ),
        "guard mode: any write with an UpdateRun, probed with a stale Run version",
        modes=("guards",),
        guard=("UpdateRun", "version"),
    ),
    _edge(
        "update_lease_no_token_digest",
        "guard",
        "V-2: the lease token digest missing from update_lease's fence",
        _write("update_lease", "\n  AND token_digest = :token_digest;", ";"),
        "guard mode: a lease update probed with a foreign token digest",
        modes=("guards",),
        hints=("LEASE-02", "LEASE-09"),
        guard=("UpdateLease", "token_digest"),
    ),
    _edge(
        "update_lease_no_generation",
        "guard",
        "V-2: lease_generation missing from update_lease's key (every generation is hit)",
        _write("update_lease", "\n  AND lease_generation = :lease_generation", ""),
        "guard mode: a lease update probed with another lease generation",
        modes=("guards",),
        hints=("LEASE-07-boundary-lease-expiry-lease-state",),
        guard=("UpdateLease", "lease_generation"),
    ),
    _edge(
        "update_lease_no_version_cas",
        "guard",
        "V-2: the lease version CAS dropped from update_lease's WHERE",
        _write("update_lease", "\n  AND version = :expected_version\n", "\n"),
        "guard mode: a lease update probed with a stale lease version",
        modes=("guards",),
        hints=("LEASE-07-boundary-lease-expiry-lease-state",),
        guard=("UpdateLease", "version"),
    ),
    _edge(
        "update_lease_no_status_guard",
        "guard",
        "the lease status CAS dropped: a released lease can be released or completed again",
        _write("update_lease", "\n  AND status = :expected_status", ""),
        "guard mode: a lease update probed with another expected lease status",
        modes=("guards",),
        guard=("UpdateLease", "status"),
    ),
    _edge(
        "update_attempt_no_status_guard",
        "guard",
        "the previous-status guard dropped from update_attempt's WHERE",
        _write("update_attempt", "\n  AND status = :expected_status", ""),
        "guard mode: an Attempt update probed with another expected status",
        modes=("guards",),
        guard=("UpdateAttempt", "status"),
    ),
    _edge(
        "update_attempt_no_lease_version_guard",
        "guard",
        "the lease-version mirror guard dropped from update_attempt's WHERE",
        _write("update_attempt", "\n  AND lease_version IS :expected_lease_version", ""),
        "guard mode: an Attempt update probed with a stale lease-version mirror",
        modes=("guards",),
        guard=("UpdateAttempt", "lease_version"),
    ),
    _edge(
        "update_policy_no_version_cas",
        "guard",
        "the policy version CAS dropped from update_policy's WHERE (lost cursor update)",
        _write(
            "update_policy",
            "WHERE run_id = :run_id\n  AND version = :expected_version;",
            "WHERE run_id = :run_id;",
        ),
        "guard mode: a lost-retry step's UpdatePolicy probed with a stale policy version",
        modes=("guards",),
        hints=("E-1-boundary-cancel-convergence-run-status",),
        guard=("UpdatePolicy", "version"),
    ),
    # -- columns not written (the corpus) --------------------------------------------------
    _edge(
        "lost_lease_left_leased",
        "write",
        "the lease status is never written: a lost/released lease stays `leased`",
        _write("update_lease", "status = :status, version", "status = status, version"),
        "any trace that releases or completes a lease (LEASE-07, REC-04)",
        hints=("LEASE-07-boundary-lease-expiry-lease-state",),
    ),
    _edge(
        "update_attempt_keeps_worker",
        "write",
        "the Attempt's worker binding is never written (kept from before)",
        _write("update_attempt", "worker_id = :worker_id,", "worker_id = worker_id,"),
        "any trace that grants a lease (the Attempt binds the Worker)",
        hints=("LEASE-09", "REC-04"),
    ),
    _edge(
        "update_attempt_keeps_status",
        "write",
        "the Attempt status is never written (a lost Attempt stays running)",
        _write(
            "update_attempt", "status = :status, executor_type", "status = status, executor_type"
        ),
        "any trace that moves an Attempt (acknowledge_starting, expiry)",
        hints=("LEASE-07-expiry-source-selects-a-lease-at-its-expiry-instant",),
    ),
    _edge(
        "retry_attempt_inherits_worker",
        "write",
        "a retry Attempt inherits the previous Attempt's worker binding",
        _write(
            "insert_attempt",
            ":worker_id, :worker_session_id,",
            "(SELECT p.worker_id FROM attempts AS p WHERE p.run_id = :run_id"
            " ORDER BY p.number DESC LIMIT 1), :worker_session_id,",
        ),
        "a requeue of a Run whose lost Attempt had a Worker (RETRY-08)",
        hints=("RETRY-08", "RETRY-09", "RUN-02"),
    ),
    # -- Events ----------------------------------------------------------------------------
    _edge(
        "events_not_inserted",
        "event",
        "V-3/I-7: the Event appends are skipped",
        MethodEdit(
            STORE,
            "EdgeTransaction.execute",
            _EXECUTE,
            "name, params = workflow_effect_statement(effect)\n"
            '        if name != "insert_event":\n'
            "            self._write(name, params)",
        ),
        "any trace with an Event (every admission); guard mode: a duplicate Event accepted",
        modes=("corpus", "guards"),
        guard=("AppendEvent", "duplicate"),
    ),
    # -- a commit in the middle of a write (kill mode, guard mode) -------------------------
    _edge(
        "events_after_commit",
        "split",
        "RUN-06: the state commits before its Events (a commit before every Event append)",
        MethodEdit(
            STORE,
            "EdgeTransaction.execute",
            _EXECUTE,
            "name, params = workflow_effect_statement(effect)\n"
            '        if name == "insert_event":\n'
            '            self._conn.execute(STATEMENTS["commit"])\n'
            '            self._conn.execute(STATEMENTS["begin_immediate"])\n'
            "        self._write(name, params)",
        ),
        "kill mode: a SIGKILL between the state's commit and the Events' commit; guard mode: "
        "a rolled-back probe leaves the committed state",
        modes=("guards", "kill"),
        hints=("RUN-06", "RETRY-10"),
    ),
    _edge(
        "commit_after_run_update",
        "split",
        "RUN-06, RETRY-10: the Run update commits before the rest of its write",
        MethodEdit(
            STORE,
            "EdgeTransaction.execute",
            _EXECUTE,
            "name, params = workflow_effect_statement(effect)\n"
            "        self._write(name, params)\n"
            '        if name == "update_run":\n'
            '            self._conn.execute(STATEMENTS["commit"])\n'
            '            self._conn.execute(STATEMENTS["begin_immediate"])',
        ),
        "kill mode: a SIGKILL after the Run update's commit, before the Attempt / lease / Event "
        "statements of the same write",
        modes=("guards", "kill"),
        hints=("RUN-06", "RETRY-10"),
    ),
    # -- the write lock (D-2) --------------------------------------------------------------
    _edge(
        "deferred_write_transaction",
        "lock",
        "D-2: a write opens `BEGIN DEFERRED`: the aggregate is read before the write lock is "
        "held, so two writers can decide on the same state",
        MethodEdit(
            CONNECTION,
            "SqliteAuthority.transaction",
            'conn.execute(STATEMENTS["begin_immediate"])',
            'conn.execute(STATEMENTS["begin_deferred"])',
        ),
        "the lock probe: while a write holds its transaction open after the load, a second "
        "connection's BEGIN IMMEDIATE must block (B-35, D-2)",
        modes=("locks",),
    ),
    # -- comparisons at exactly-equal times ------------------------------------------------
    _edge(
        "lost_retry_due_strict",
        "operator",
        "RETRY-07: `<` instead of `<=` for a due retry_wait in the lost-retry source",
        _source(
            "lost_retry_candidates",
            "p.next_attempt_at_ms <= :observed_at_ms",
            "p.next_attempt_at_ms < :observed_at_ms",
        ),
        "a lost_retry query at observed_at_ms == next_attempt_at_ms",
        hints=("RETRY-07", "RETRY-08", "RETRY-20"),
    ),
    _edge(
        "lease_expiry_strict",
        "operator",
        "LEASE-07: `<` instead of `<=` for an expired lease in the lease-expiry source",
        _source(
            "lease_expiry_candidates",
            "l.expires_at_ms <= :observed_at_ms",
            "l.expires_at_ms < :observed_at_ms",
        ),
        "a lease_expiry query at observed_at_ms == expires_at_ms",
        hints=("LEASE-07", "LEASE-08"),
    ),
    _edge(
        "lease_expiry_after_strict",
        "operator",
        "LEASE-07: `<` instead of `<=` in the lease-expiry source's cursor page",
        _source(
            "lease_expiry_candidates_after",
            "l.expires_at_ms <= :observed_at_ms",
            "l.expires_at_ms < :observed_at_ms",
        ),
        "a lease_expiry query with a cursor whose next lease expires exactly at observed_at_ms",
        hints=("LEASE-07",),
    ),
    _edge(
        "orphaned_created_at_start_selected",
        "operator",
        "B-30, REC-12: `<=` instead of `<` for a created Run in the orphaned-created source "
        "(a Run created at exactly the process start is this process's own)",
        _source(
            "orphaned_created_candidates",
            "r.created_at_ms < :process_started_at_ms",
            "r.created_at_ms <= :process_started_at_ms",
        ),
        "an orphaned_created query with a created Run at created_at_ms == process_started_at_ms",
        hints=("REC-12-boundary-orphaned-created-time-equal",),
    ),
    _edge(
        "lease_expiry_cursor_inclusive",
        "operator",
        "P-3: `>=` instead of `>` in the lease-expiry keyset (the cursor's row again)",
        _source(
            "lease_expiry_candidates_after",
            "(l.expires_at_ms, l.attempt_id) > (:after_expires_at_ms, :after_attempt_id)",
            "(l.expires_at_ms, l.attempt_id) >= (:after_expires_at_ms, :after_attempt_id)",
        ),
        "a lease_expiry query whose cursor is the key of a still-expired leased lease",
        hints=("LEASE-07",),
    ),
    _edge(
        "local_startup_cursor_inclusive",
        "operator",
        "P-3: `>=` instead of `>` in the local-startup keyset (the cursor's Attempt again)",
        _source(
            "local_startup_candidates_after",
            "a.attempt_id > :after_attempt_id",
            "a.attempt_id >= :after_attempt_id",
        ),
        "a local_startup query with a cursor equal to a still-eligible Attempt's id",
        hints=("REC-07",),
    ),
    _edge(
        "orphaned_created_cursor_inclusive",
        "operator",
        "P-3: `>=` instead of `>` in the orphaned-created keyset",
        _source(
            "orphaned_created_candidates_after",
            "(r.created_at_ms, r.run_id) > (:after_created_at_ms, :after_run_id)",
            "(r.created_at_ms, r.run_id) >= (:after_created_at_ms, :after_run_id)",
        ),
        "an orphaned_created query with a cursor equal to a still-eligible Run's key",
        hints=("REC-12",),
    ),
    _edge(
        "local_dispatch_cursor_inclusive",
        "operator",
        "P-3: `>=` instead of `>` in the local-dispatch keyset",
        _source(
            "local_dispatch_candidates_after",
            "      > (:after_queued_at_ms, :after_created_at_ms, :after_attempt_id)",
            "      >= (:after_queued_at_ms, :after_created_at_ms, :after_attempt_id)",
        ),
        "a local_dispatch query with a cursor equal to a still-claimed Attempt's key",
        hints=("RETRY-18",),
    ),
    # -- `LIMIT :limit` instead of `:limit + 1` (has_more, P-2) ----------------------------
    _edge(
        "lost_retry_has_more_off_by_one",
        "limit",
        "P-2: `LIMIT :limit` instead of `:limit + 1` in the lost-retry source",
        _source("lost_retry_candidates", "LIMIT :limit + 1;", "LIMIT :limit;"),
        "a lost_retry query with more candidates than the limit",
        hints=("RETRY-13-boundary-lost-retry-page-full-plus-one",),
    ),
    _edge(
        "lease_expiry_has_more_off_by_one",
        "limit",
        "P-2: `LIMIT :limit` instead of `:limit + 1` in the lease-expiry source",
        _source("lease_expiry_candidates", "LIMIT :limit + 1;", "LIMIT :limit;"),
        "a lease_expiry query with limit + 1 expired leases (has_more true)",
        hints=("LEASE-07",),
    ),
    _edge(
        "local_startup_has_more_off_by_one",
        "limit",
        "P-2: `LIMIT :limit` instead of `:limit + 1` in the local-startup source",
        _source("local_startup_candidates", "LIMIT :limit + 1;", "LIMIT :limit;"),
        "a local_startup query with limit + 1 started local Attempts",
        hints=("REC-07-boundary-local-startup-cursor-attempt_id",),
    ),
    _edge(
        "orphaned_created_has_more_off_by_one",
        "limit",
        "P-2: `LIMIT :limit` instead of `:limit + 1` in the orphaned-created source",
        _source("orphaned_created_candidates", "LIMIT :limit + 1;", "LIMIT :limit;"),
        "an orphaned_created query with limit + 1 orphaned created Runs",
        hints=("REC-12",),
    ),
    _edge(
        "cancel_convergence_has_more_off_by_one",
        "limit",
        "P-2: `LIMIT :limit` instead of `:limit + 1` in the cancellation-convergence source",
        _source("cancel_convergence_candidates", "LIMIT :limit + 1;", "LIMIT :limit;"),
        "a cancel_convergence query with limit + 1 converging Runs",
        hints=("E-1-boundary-cancel-convergence-page-full-plus-one",),
    ),
    _edge(
        "local_dispatch_has_more_off_by_one",
        "limit",
        "P-2: `LIMIT :limit` instead of `:limit + 1` in the local-dispatch source",
        _source("local_dispatch_candidates", "LIMIT :limit + 1;", "LIMIT :limit;"),
        "a local_dispatch query with limit + 1 claimed local Attempts",
        hints=("RETRY-18-boundary-local-dispatch-cursor-attempt_id",),
    ),
    # -- a wrong keyset tie-break (P-3, P-4) -----------------------------------------------
    _edge(
        "lost_retry_tie_break_descending",
        "order",
        "P-4: lost-retry candidates that tie on (k0, k1) ordered by run_id descending",
        _source(
            "lost_retry_candidates",
            "ORDER BY k0, k1, run_id\n",
            "ORDER BY k0, k1, run_id DESC\n",
        ),
        "a lost_retry query whose two candidates tie on finished_at_ms (or next_attempt_at_ms)",
        hints=("RETRY-15-boundary-lost-retry-order-run_id",),
    ),
    _edge(
        "lease_expiry_tie_break_descending",
        "order",
        "P-4: expired leases that tie on expires_at_ms ordered by attempt_id descending",
        _source(
            "lease_expiry_candidates",
            "ORDER BY l.expires_at_ms, l.attempt_id\n",
            "ORDER BY l.expires_at_ms, l.attempt_id DESC\n",
        ),
        "a lease_expiry query whose two leases tie on expires_at_ms",
        hints=("LEASE-07",),
    ),
    _edge(
        "orphaned_created_tie_break_descending",
        "order",
        "P-4: orphaned created Runs that tie on created_at_ms ordered by run_id descending",
        _source(
            "orphaned_created_candidates",
            "ORDER BY r.created_at_ms, r.run_id\n",
            "ORDER BY r.created_at_ms, r.run_id DESC\n",
        ),
        "an orphaned_created query whose two Runs tie on created_at_ms",
        hints=("REC-12",),
    ),
    _edge(
        "cancel_convergence_tie_break_descending",
        "order",
        "P-4: converging Runs that tie on cancel_requested_at_ms ordered by run_id descending",
        _source(
            "cancel_convergence_candidates",
            "ORDER BY r.cancel_requested_at_ms, r.run_id\n",
            "ORDER BY r.cancel_requested_at_ms, r.run_id DESC\n",
        ),
        "a cancel_convergence query whose two Runs tie on cancel_requested_at_ms",
        hints=("E-1-boundary-cancel-convergence-order-run_id",),
    ),
    _edge(
        "local_dispatch_tie_break_descending",
        "order",
        "P-4: claimed local Attempts that tie on (queued, created) ordered by id descending",
        _source(
            "local_dispatch_candidates",
            "ORDER BY k0, k1, a.attempt_id\n",
            "ORDER BY k0, k1, a.attempt_id DESC\n",
        ),
        "a local_dispatch query whose two Attempts tie on queued_at_ms and created_at_ms",
        hints=("RETRY-18",),
    ),
    # -- an exclusion dropped from a source's WHERE (P-6) ----------------------------------
    _edge(
        "lost_retry_ignores_cancel_intent",
        "exclusion",
        "RETRY-11: the lost-retry source selects a due retry_wait Run despite a cancellation "
        "intent (the intent check dropped from the retry_wait branch)",
        _source(
            "lost_retry_candidates",
            "      AND r.cancel_requested_at_ms IS NULL\n"
            "      AND a.status = 'lost'\n"
            "      AND p.next_attempt_at_ms",
            "      AND a.status = 'lost'\n      AND p.next_attempt_at_ms",
        ),
        "a lost_retry query with a due retry_wait Run that has a cancellation intent",
        hints=("RETRY-11-cancel-intent",),
    ),
    _edge(
        "local_startup_selects_workflow_runs",
        "exclusion",
        "REC-07: the local startup source returns Workflow Runs (kind filter dropped)",
        _source("local_startup_candidates", "  AND r.kind = 'ordinary'\nORDER BY", "ORDER BY"),
        "a local_startup query with a started local Attempt of a Workflow Run",
        hints=("REC-07-workflow-runs-never-selected-by-local-startup",),
    ),
    _edge(
        "orphaned_created_selects_workflow_runs",
        "exclusion",
        "REC-12: the orphaned-created source returns created Workflow Runs (kind filter dropped)",
        _source("orphaned_created_candidates", "  AND r.kind = 'ordinary'\nORDER BY", "ORDER BY"),
        "an orphaned_created query with an old created Workflow Run",
        hints=("REC-12-boundary-orphaned-created-exclude-workflow",),
    ),
    _edge(
        "cancel_convergence_ignores_revoked_authority",
        "exclusion",
        "E-1: the cancellation source skips a started Run whose lease T9 released",
        _source(
            "cancel_convergence_candidates",
            "AND l.release_reason = 'lease_expired'",
            "AND l.release_reason = 'cancelled'",
        ),
        "a cancel_convergence query after a cancel request on a Run whose lease expired",
        hints=("E-1-boundary-cancel-convergence-revoked-authority",),
    ),
    _edge(
        "cancel_convergence_ignores_owner",
        "exclusion",
        "D-6: the cancellation source selects a Workflow-owned Run with an intent",
        _source(
            "cancel_convergence_candidates",
            "  AND r.owner = 'runtime'\n  AND r.kind",
            "  AND r.kind",
        ),
        "a cancel_convergence query with a cancel-requested Run whose owner is not the runtime",
        hints=("E-1-boundary-cancel-convergence-exclude-non-runtime-owner",),
    ),
    _edge(
        "local_dispatch_ignores_owner",
        "exclusion",
        "D-13: the local-dispatch source returns a claimed Attempt of a non-runtime Run",
        _source("local_dispatch_candidates", "\n  AND r.owner = 'runtime'", ""),
        "a local_dispatch query with a claimed local Attempt of a queued legacy-owned Run",
        hints=("RETRY-18-boundary-local-dispatch-exclude-non-runtime-owner",),
    ),
    _edge(
        "orphaned_created_ignores_owner",
        "exclusion",
        "B-30: the orphaned-created source returns an old created Run of a non-runtime owner",
        _source(
            "orphaned_created_candidates",
            "  AND r.owner = 'runtime'\n  AND r.kind",
            "  AND r.kind",
        ),
        "an orphaned_created query with an old created legacy-owned Run",
        hints=("REC-12-boundary-orphaned-created-exclude-non-runtime-owner",),
    ),
    _edge(
        "local_dispatch_ignores_executor_type",
        "exclusion",
        "D-13: the local-dispatch source returns claimed Attempts of another executor type",
        _source(
            "local_dispatch_candidates",
            "\n  AND a.executor_type = :local_executor_type",
            "",
        ),
        "a local_dispatch query with a claimed Attempt of another executor type",
        hints=("RETRY-18-boundary-local-dispatch-executor-type",),
    ),
    _edge(
        "local_dispatch_ignores_cancel_intent",
        "exclusion",
        "D-13: the local-dispatch source returns a queued Run with a cancellation intent",
        _source(
            "local_dispatch_candidates",
            "\n  AND r.cancel_requested_at_ms IS NULL",
            "",
        ),
        "a local_dispatch query with a claimed local Attempt of a cancel-requested queued Run",
        hints=("RETRY-18-boundary-local-dispatch-exclude-cancel-intent",),
    ),
)

BY_NAME: Mapping[str, RunnerMutant] = {m.name: m for m in MUTANTS}


# -- the approval domain (SPEC §5, issue 19): planted in `runners/edge/sql/approved_action.sql`
# and caught by the approval corpus (`conformance/traces/approved_action`, replayed with its
# own root: `tests/conformance/test_approval_traces.py`), so they are not in `MUTANTS`, whose
# catch rate is measured over the run corpus.
def _approval(section: str, old: str, new: str) -> SqlEdit:
    return SqlEdit(STORE, "APPROVAL", section, old, new)


#: The approval branch of `EdgeTransaction.execute`, the text the split-commit mutant edits.
_ACTION_EXECUTE = "name, params = action_effect_statement(effect)\n"

APPROVAL_MUTANTS: tuple[RunnerMutant, ...] = (
    _edge(
        "aa_action_event_after_commit",
        "split",
        "AA-D1: the action's update committed before its Event (and, for a start, before the "
        "Run's admission): a crash between them leaves the barrier passed without its Event, "
        "or an action started without its Run",
        MethodEdit(
            STORE,
            "EdgeTransaction.execute",
            _ACTION_EXECUTE,
            _ACTION_EXECUTE + '            if name == "insert_action_event":\n'
            '                self._conn.execute(STATEMENTS["commit"])\n'
            '                self._conn.execute(STATEMENTS["begin_immediate"])\n',
        ),
        "kill mode: a SIGKILL between an action update's commit and its Event's",
        modes=("kill",),
    ),
    _edge(
        "aa_update_action_no_version_cas",
        "guard",
        "AA-D1: the action's version CAS dropped from update_action's WHERE (two dispatchers "
        "could both pass the start barrier)",
        _approval(
            "update_action",
            "WHERE action_id = :action_id AND version = :expected_version;",
            "WHERE action_id = :action_id;",
        ),
        "guard mode: any approval write, probed with an older action version",
        modes=("guards",),
        guard=("UpdateAction", "version"),
    ),
    _edge(
        "aa_dispatch_due_limit_without_one_more",
        "limit",
        "SPEC §5.3: the dispatch due index fetches `limit` rows, so a full page never says "
        "truncated and the phase stops early",
        _approval("approval_dispatch", "LIMIT :limit_plus_one;", "LIMIT :limit_plus_one - 1;"),
        "a dispatch page exactly full with more due (AA-D1 due pages)",
        hints=("AA-D1-due-pages",),
    ),
    _edge(
        "aa_recovery_due_tie_break_reversed",
        "order",
        "P-3: the recovery due index orders actions claimed at the same time by descending id, "
        "against its keyset cursor",
        _approval(
            "approval_recovery",
            "ORDER BY claimed_at_ms, action_id\n",
            "ORDER BY claimed_at_ms, action_id DESC\n",
        ),
        "a recovery page over actions claimed at the same millisecond (AA-D1 due pages)",
        hints=("AA-D1-due-pages",),
    ),
    _edge(
        "aa_dispatch_due_includes_pending",
        "exclusion",
        "AA-D1: the dispatch due index also returns pending actions (an unapproved request "
        "would be dispatched)",
        _approval(
            "approval_dispatch",
            "WHERE status = 'approved'",
            "WHERE status IN ('approved', 'pending')",
        ),
        "a dispatch page while a request is pending",
        hints=("AA-D1-request-approve", "AA-D1-due-pages"),
    ),
)
