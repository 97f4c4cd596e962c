"""Planted-bug variants of the cluster PostgreSQL runner (issue 16 item 2: the runner mutation
tier), beside the edge runner's (`tests/runners/edge/edge_mutants.py`).

Each mutant is one realistic, small bug of the cluster runner, made by an exact edit of its real
source text (`tests/support/runner_mutants.py`): a named SQL section of
`runners/cluster/sql/*.sql` as `runners.cluster.store` looks it up at execution time
(`STATEMENTS` for loads and writes, `SOURCES` for the candidate sources), or a method of
`runners/cluster/store.py`. `modes` names the parts of `qlk conform` that must each catch it,
`boundary` the trace or check that does.

The kinds issue 16 names, on this runner: comparisons flipped at exactly-equal times, `LIMIT
limit` instead of `limit + 1`, a wrong keyset tie-break, an exclusion dropped from a source's
WHERE (owner, cancellation intent, Workflow kind, executor type), a guard column dropped from an
UPDATE, a dropped Event append, a commit in the middle of a write, and a missing `FOR UPDATE` on
each kind of row the aggregate load locks (B-35). A draining Worker is the kernel's exclusion
(the grant's fence), not a runner's: no cluster statement reads Worker sessions. Dropping
`COLLATE "C"` from a tie-break is not planted: on a database whose collation is code-point order
(the CI's `C.UTF-8`) it changes nothing, an equivalent mutant.
"""

from __future__ import annotations

from collections.abc import Mapping

from tests.support.runner_mutants import MethodEdit, RunnerMutant, SqlEdit

STORE = "runners.cluster.store"


def _write(section: str, old: str, new: str) -> SqlEdit:
    return SqlEdit(STORE, "STATEMENTS", section, old, new)


def _source(section: str, old: str, new: str) -> SqlEdit:
    return SqlEdit(STORE, "SOURCES", section, old, new)


#: `ClusterTransaction.execute`'s body, the text the Event and split-commit mutants edit.
_EXECUTE = (
    "name, params = workflow_effect_statement(effect)\n"
    "        self._write(name, _pg_params(params))"
)


def _cluster(
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
    return RunnerMutant(name, "cluster", kind, breaks, (edit,), boundary, modes, hints, guard)


def _no_row_lock(section: str, rows: str, old: str) -> RunnerMutant:
    """`FOR UPDATE` dropped from one aggregate load (B-35: the load locks what it reads)."""
    return _cluster(
        f"{section}_without_for_update",
        "lock",
        f"B-35: {section} reads {rows} without `FOR UPDATE`: a second writer can read and "
        "decide on them while the write is open",
        _write(section, f"{old}\nFOR UPDATE;", f"{old};"),
        f"the lock probe: while a write holds its transaction open after the load, a second "
        f"connection's SELECT ... FOR UPDATE of {rows} must block (B-35)",
        modes=("locks",),
    )


MUTANTS: tuple[RunnerMutant, ...] = (
    # -- guard columns dropped from an UPDATE's WHERE (guard mode) ---------------------------
    _cluster(
        "update_run_no_version_cas",
        "guard",
        "V-1: the Run version CAS dropped from update_run's WHERE (lost update)",
        _write(
            "update_run",
            "WHERE run_id = %(run_id)s\n  AND version = %(expected_version)s;",
            "WHERE run_id = %(run_id)s;",
        ),
        "guard mode: any write with an UpdateRun, probed with a stale Run version",
        modes=("guards",),
        guard=("UpdateRun", "version"),
    ),
    _cluster(
        "update_lease_no_token_digest",
        "guard",
        "V-2: the lease token digest missing from update_lease's fence",
        _write("update_lease", "\n  AND token_digest = %(token_digest)s;", ";"),
        "guard mode: a lease update probed with a foreign token digest",
        modes=("guards",),
        hints=("LEASE-02", "LEASE-09"),
        guard=("UpdateLease", "token_digest"),
    ),
    _cluster(
        "update_lease_no_generation",
        "guard",
        "V-2: lease_generation missing from update_lease's key (every generation is hit)",
        _write("update_lease", "\n  AND lease_generation = %(lease_generation)s", ""),
        "guard mode: a lease update probed with another lease generation",
        modes=("guards",),
        hints=("LEASE-07-boundary-lease-expiry-lease-state",),
        guard=("UpdateLease", "lease_generation"),
    ),
    _cluster(
        "update_lease_no_version_cas",
        "guard",
        "V-2: the lease version CAS dropped from update_lease's WHERE",
        _write("update_lease", "\n  AND version = %(expected_version)s\n", "\n"),
        "guard mode: a lease update probed with a stale lease version",
        modes=("guards",),
        hints=("LEASE-07-boundary-lease-expiry-lease-state",),
        guard=("UpdateLease", "version"),
    ),
    _cluster(
        "update_lease_no_status_guard",
        "guard",
        "the lease status CAS dropped: a released lease can be released or completed again",
        _write("update_lease", "\n  AND status = %(expected_status)s", ""),
        "guard mode: a lease update probed with another expected lease status",
        modes=("guards",),
        guard=("UpdateLease", "status"),
    ),
    _cluster(
        "update_attempt_no_status_guard",
        "guard",
        "the previous-status guard dropped from update_attempt's WHERE",
        _write("update_attempt", "\n  AND status = %(expected_status)s", ""),
        "guard mode: an Attempt update probed with another expected status",
        modes=("guards",),
        guard=("UpdateAttempt", "status"),
    ),
    _cluster(
        "update_attempt_no_lease_version_guard",
        "guard",
        "the lease-version mirror guard dropped from update_attempt's WHERE",
        _write(
            "update_attempt",
            "\n  AND lease_version IS NOT DISTINCT FROM %(expected_lease_version)s",
            "",
        ),
        "guard mode: an Attempt update probed with a stale lease-version mirror",
        modes=("guards",),
        guard=("UpdateAttempt", "lease_version"),
    ),
    _cluster(
        "update_policy_no_version_cas",
        "guard",
        "the policy version CAS dropped from update_policy's WHERE (lost cursor update)",
        _write(
            "update_policy",
            "WHERE run_id = %(run_id)s\n  AND version = %(expected_version)s;",
            "WHERE run_id = %(run_id)s;",
        ),
        "guard mode: a lost-retry step's UpdatePolicy probed with a stale policy version",
        modes=("guards",),
        hints=("E-1-boundary-cancel-convergence-run-status",),
        guard=("UpdatePolicy", "version"),
    ),
    # -- columns not written (the corpus) --------------------------------------------------
    _cluster(
        "lost_lease_left_leased",
        "write",
        "the lease status is never written: a lost/released lease stays `leased`",
        _write("update_lease", "status = %(status)s, version", "status = status, version"),
        "any trace that releases or completes a lease (LEASE-07, REC-04)",
        hints=("LEASE-07-boundary-lease-expiry-lease-state",),
    ),
    _cluster(
        "update_attempt_keeps_worker",
        "write",
        "the Attempt's worker binding is never written (kept from before)",
        _write("update_attempt", "worker_id = %(worker_id)s,", "worker_id = worker_id,"),
        "any trace that grants a lease (the Attempt binds the Worker)",
        hints=("LEASE-09", "REC-04"),
    ),
    _cluster(
        "update_attempt_keeps_status",
        "write",
        "the Attempt status is never written (a lost Attempt stays running)",
        _write(
            "update_attempt", "status = %(status)s, executor_type", "status = status, executor_type"
        ),
        "any trace that moves an Attempt (acknowledge_starting, expiry)",
        hints=("LEASE-07-expiry-source-selects-a-lease-at-its-expiry-instant",),
    ),
    _cluster(
        "retry_attempt_inherits_worker",
        "write",
        "a retry Attempt inherits the previous Attempt's worker binding",
        _write(
            "insert_attempt",
            "%(worker_id)s, %(worker_session_id)s,",
            "(SELECT p.worker_id FROM attempts AS p WHERE p.run_id = %(run_id)s"
            " ORDER BY p.number DESC LIMIT 1), %(worker_session_id)s,",
        ),
        "a requeue of a Run whose lost Attempt had a Worker (RETRY-08)",
        hints=("RETRY-08", "RETRY-09", "RUN-02"),
    ),
    # -- Events ----------------------------------------------------------------------------
    _cluster(
        "events_not_inserted",
        "event",
        "V-3/I-7: the Event appends are skipped",
        MethodEdit(
            STORE,
            "ClusterTransaction.execute",
            _EXECUTE,
            "name, params = workflow_effect_statement(effect)\n"
            '        if name != "insert_event":\n'
            "            self._write(name, _pg_params(params))",
        ),
        "any trace with an Event (every admission); guard mode: a duplicate Event accepted",
        modes=("corpus", "guards"),
        guard=("AppendEvent", "duplicate"),
    ),
    # -- a commit in the middle of a write (kill, terminate and guard modes) ---------------
    _cluster(
        "events_after_commit",
        "split",
        "RUN-06: the state commits before its Events (a COMMIT before every Event append; "
        "what follows runs outside the write's transaction)",
        MethodEdit(
            STORE,
            "ClusterTransaction.execute",
            _EXECUTE,
            "name, params = workflow_effect_statement(effect)\n"
            '        if name == "insert_event":\n'
            '            self._conn.execute(STATEMENTS["commit"])\n'
            "        self._write(name, _pg_params(params))",
        ),
        "kill / terminate mode: a fault after the state's COMMIT, before the Events; guard "
        "mode: a rolled-back probe leaves the committed state",
        modes=("guards", "kill", "terminate"),
        hints=("RUN-06", "RETRY-10"),
    ),
    _cluster(
        "commit_after_run_update",
        "split",
        "RUN-06, RETRY-10: the Run update commits before the rest of its write",
        MethodEdit(
            STORE,
            "ClusterTransaction.execute",
            _EXECUTE,
            "name, params = workflow_effect_statement(effect)\n"
            "        self._write(name, _pg_params(params))\n"
            '        if name == "update_run":\n'
            '            self._conn.execute(STATEMENTS["commit"])',
        ),
        "kill / terminate mode: a fault after the Run update's COMMIT, before the Attempt / "
        "lease / Event statements of the same write",
        modes=("guards", "kill", "terminate"),
        hints=("RUN-06", "RETRY-10"),
    ),
    # -- row locks (B-35) ------------------------------------------------------------------
    _no_row_lock("select_run", "the Run row", "WHERE run_id = %(run_id)s"),
    _no_row_lock("select_attempts_of_run", "the Attempt rows", "ORDER BY number"),
    _no_row_lock("select_policy_of_run", "the policy row", "WHERE run_id = %(run_id)s"),
    _no_row_lock("select_leases_of_run", "the lease rows", "ORDER BY attempt_id, lease_generation"),
    # -- comparisons at exactly-equal times ------------------------------------------------
    _cluster(
        "lost_retry_due_strict",
        "operator",
        "RETRY-07: `<` instead of `<=` for a due retry_wait in the lost-retry source",
        _source(
            "lost_retry_candidates",
            "p.next_attempt_at_ms <= %(observed_at_ms)s",
            "p.next_attempt_at_ms < %(observed_at_ms)s",
        ),
        "a lost_retry query at observed_at_ms == next_attempt_at_ms",
        hints=("RETRY-07", "RETRY-08", "RETRY-20"),
    ),
    _cluster(
        "runtime_recovery_expiry_strict",
        "operator",
        "REC-01, REC-03: `<` instead of `<=` for an expired lease in the runtime-recovery source",
        _source(
            "runtime_recovery_candidates",
            "l.expires_at_ms <= %(observed_at_ms)s",
            "l.expires_at_ms < %(observed_at_ms)s",
        ),
        "a runtime_recovery query at observed_at_ms == the leased lease's expires_at_ms",
        hints=("REC-01", "REC-03"),
    ),
    _cluster(
        "lease_expiry_strict",
        "operator",
        "LEASE-07: `<` instead of `<=` for an expired lease in the lease-expiry source",
        _source(
            "lease_expiry_candidates",
            "l.expires_at_ms <= %(observed_at_ms)s",
            "l.expires_at_ms < %(observed_at_ms)s",
        ),
        "a lease_expiry query at observed_at_ms == expires_at_ms",
        hints=("LEASE-07", "LEASE-08"),
    ),
    _cluster(
        "lease_expiry_after_strict",
        "operator",
        "LEASE-07: `<` instead of `<=` in the lease-expiry source's cursor page",
        _source(
            "lease_expiry_candidates_after",
            "l.expires_at_ms <= %(observed_at_ms)s",
            "l.expires_at_ms < %(observed_at_ms)s",
        ),
        "a lease_expiry query with a cursor whose next lease expires exactly at observed_at_ms",
        hints=("LEASE-07",),
    ),
    _cluster(
        "orphaned_created_at_start_selected",
        "operator",
        "B-30, REC-12: `<=` instead of `<` for a created Run in the orphaned-created source "
        "(a Run created at exactly the process start is this process's own)",
        _source(
            "orphaned_created_candidates",
            "r.created_at_ms < %(process_started_at_ms)s",
            "r.created_at_ms <= %(process_started_at_ms)s",
        ),
        "an orphaned_created query with a created Run at created_at_ms == process_started_at_ms",
        hints=("REC-12-boundary-orphaned-created-time-equal",),
    ),
    _cluster(
        "lease_expiry_cursor_inclusive",
        "operator",
        "P-3: `>=` instead of `>` in the lease-expiry keyset (the cursor's row again)",
        _source(
            "lease_expiry_candidates_after",
            '(l.expires_at_ms, l.attempt_id COLLATE "C") > (',
            '(l.expires_at_ms, l.attempt_id COLLATE "C") >= (',
        ),
        "a lease_expiry query whose cursor is the key of a still-expired leased lease",
        hints=("LEASE-07",),
    ),
    _cluster(
        "local_startup_cursor_inclusive",
        "operator",
        "P-3: `>=` instead of `>` in the local-startup keyset (the cursor's Attempt again)",
        _source(
            "local_startup_candidates_after",
            'a.attempt_id COLLATE "C" > %(after_attempt_id)s',
            'a.attempt_id COLLATE "C" >= %(after_attempt_id)s',
        ),
        "a local_startup query with a cursor equal to a still-eligible Attempt's id",
        hints=("REC-07",),
    ),
    _cluster(
        "orphaned_created_cursor_inclusive",
        "operator",
        "P-3: `>=` instead of `>` in the orphaned-created keyset",
        _source(
            "orphaned_created_candidates_after",
            '(r.created_at_ms, r.run_id COLLATE "C") > (',
            '(r.created_at_ms, r.run_id COLLATE "C") >= (',
        ),
        "an orphaned_created query with a cursor equal to a still-eligible Run's key",
        hints=("REC-12",),
    ),
    _cluster(
        "local_dispatch_cursor_inclusive",
        "operator",
        "P-3: `>=` instead of `>` in the local-dispatch keyset",
        _source(
            "local_dispatch_candidates_after",
            "      > (%(after_queued_at_ms)s,",
            "      >= (%(after_queued_at_ms)s,",
        ),
        "a local_dispatch query with a cursor equal to a still-claimed Attempt's key",
        hints=("RETRY-18",),
    ),
    # -- `LIMIT limit` instead of `limit + 1` (has_more, P-2) ------------------------------
    *(
        _cluster(
            f"{source}_has_more_off_by_one",
            "limit",
            f"P-2: `LIMIT limit` instead of `limit + 1` in the {source} source",
            _source(f"{source}_candidates", "LIMIT %(limit)s + 1;", "LIMIT %(limit)s;"),
            f"a {source} query with more candidates than the limit (has_more true)",
            hints=hints,
        )
        for source, hints in (
            ("lost_retry", ("RETRY-13-boundary-lost-retry-page-full-plus-one",)),
            ("runtime_recovery", ("REC-02-boundary-runtime-recovery-page-full-plus-one",)),
            ("lease_expiry", ("LEASE-07",)),
            ("local_startup", ("REC-07-boundary-local-startup-cursor-attempt_id",)),
            ("orphaned_created", ("REC-12",)),
            ("cancel_convergence", ("E-1-boundary-cancel-convergence-page-full-plus-one",)),
            ("local_dispatch", ("RETRY-18-boundary-local-dispatch-cursor-attempt_id",)),
        )
    ),
    # -- a wrong keyset tie-break (P-3, P-4) -----------------------------------------------
    _cluster(
        "lost_retry_tie_break_descending",
        "order",
        "P-4: lost-retry candidates that tie on (k0, k1) ordered by run_id descending",
        _source(
            "lost_retry_candidates",
            'ORDER BY k0, k1, run_id COLLATE "C"\n',
            'ORDER BY k0, k1, run_id COLLATE "C" DESC\n',
        ),
        "a lost_retry query whose two candidates tie on finished_at_ms (or next_attempt_at_ms)",
        hints=("RETRY-15-boundary-lost-retry-order-run_id",),
    ),
    _cluster(
        "runtime_recovery_tie_break_descending",
        "order",
        "P-4: recovery candidates that tie on (k0, k1) ordered by attempt_id descending",
        _source(
            "runtime_recovery_candidates",
            'ORDER BY k0, k1, a.attempt_id COLLATE "C"\n',
            'ORDER BY k0, k1, a.attempt_id COLLATE "C" DESC\n',
        ),
        "a runtime_recovery query whose two candidates tie (two without a leased lease)",
        hints=("REC-01", "REC-02"),
    ),
    _cluster(
        "lease_expiry_tie_break_descending",
        "order",
        "P-4: expired leases that tie on expires_at_ms ordered by attempt_id descending",
        _source(
            "lease_expiry_candidates",
            'ORDER BY l.expires_at_ms, l.attempt_id COLLATE "C"\n',
            'ORDER BY l.expires_at_ms, l.attempt_id COLLATE "C" DESC\n',
        ),
        "a lease_expiry query whose two leases tie on expires_at_ms",
        hints=("LEASE-07",),
    ),
    _cluster(
        "orphaned_created_tie_break_descending",
        "order",
        "P-4: orphaned created Runs that tie on created_at_ms ordered by run_id descending",
        _source(
            "orphaned_created_candidates",
            'ORDER BY r.created_at_ms, r.run_id COLLATE "C"\n',
            'ORDER BY r.created_at_ms, r.run_id COLLATE "C" DESC\n',
        ),
        "an orphaned_created query whose two Runs tie on created_at_ms",
        hints=("REC-12",),
    ),
    _cluster(
        "cancel_convergence_tie_break_descending",
        "order",
        "P-4: converging Runs that tie on cancel_requested_at_ms ordered by run_id descending",
        _source(
            "cancel_convergence_candidates",
            'ORDER BY r.cancel_requested_at_ms, r.run_id COLLATE "C"\n',
            'ORDER BY r.cancel_requested_at_ms, r.run_id COLLATE "C" DESC\n',
        ),
        "a cancel_convergence query whose two Runs tie on cancel_requested_at_ms",
        hints=("E-1-boundary-cancel-convergence-order-run_id",),
    ),
    _cluster(
        "local_dispatch_tie_break_descending",
        "order",
        "P-4: claimed local Attempts that tie on (queued, created) ordered by id descending",
        _source(
            "local_dispatch_candidates",
            'ORDER BY k0, k1, a.attempt_id COLLATE "C"\n',
            'ORDER BY k0, k1, a.attempt_id COLLATE "C" DESC\n',
        ),
        "a local_dispatch query whose two Attempts tie on queued_at_ms and created_at_ms",
        hints=("RETRY-18",),
    ),
    # -- an exclusion dropped from a source's WHERE (P-6) ----------------------------------
    _cluster(
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
    _cluster(
        "runtime_recovery_selects_workflow_runs",
        "exclusion",
        "REC-07: the runtime-recovery source returns Workflow Runs (kind filter dropped)",
        _source(
            "runtime_recovery_candidates",
            "  AND r.kind = 'ordinary'\n  AND a.status IN",
            "  AND a.status IN",
        ),
        "a runtime_recovery query with an expired started Attempt of a Workflow Run",
        hints=("REC-07-workflow-runs-never-selected-by-cluster-source",),
    ),
    _cluster(
        "local_startup_selects_workflow_runs",
        "exclusion",
        "REC-07: the local startup source returns Workflow Runs (kind filter dropped)",
        _source("local_startup_candidates", "  AND r.kind = 'ordinary'\nORDER BY", "ORDER BY"),
        "a local_startup query with a started local Attempt of a Workflow Run",
        hints=("REC-07-workflow-runs-never-selected-by-local-startup",),
    ),
    _cluster(
        "orphaned_created_selects_workflow_runs",
        "exclusion",
        "REC-12: the orphaned-created source returns created Workflow Runs (kind filter dropped)",
        _source("orphaned_created_candidates", "  AND r.kind = 'ordinary'\nORDER BY", "ORDER BY"),
        "an orphaned_created query with an old created Workflow Run",
        hints=("REC-12-boundary-orphaned-created-exclude-workflow",),
    ),
    _cluster(
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
    _cluster(
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
    _cluster(
        "local_dispatch_ignores_owner",
        "exclusion",
        "D-13: the local-dispatch source returns a claimed Attempt of a non-runtime Run",
        _source("local_dispatch_candidates", "\n  AND r.owner = 'runtime'", ""),
        "a local_dispatch query with a claimed local Attempt of a queued legacy-owned Run",
        hints=("RETRY-18-boundary-local-dispatch-exclude-non-runtime-owner",),
    ),
    _cluster(
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
    _cluster(
        "local_dispatch_ignores_executor_type",
        "exclusion",
        "D-13: the local-dispatch source returns claimed Attempts of another executor type",
        _source(
            "local_dispatch_candidates",
            "\n  AND a.executor_type = %(local_executor_type)s",
            "",
        ),
        "a local_dispatch query with a claimed Attempt of another executor type",
        hints=("RETRY-18-boundary-local-dispatch-executor-type",),
    ),
    _cluster(
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
