"""Every result and error code of SPEC Appendix A in one `StrEnum`.

Values are the stable wire strings that traces, Events and runners carry. Appendix A mixes two
spellings on purpose: persisted error codes and rejections are `UPPER_SNAKE`, replay results,
dispositions and evidence values are `lower_snake`. Both are kept verbatim.
"""

from __future__ import annotations

import enum


class Code(enum.StrEnum):
    # -- persisted Run/Attempt error codes (Appendix A, decision) ---------------------------
    START_FAILED = "START_FAILED"
    LEASE_EXPIRED = "LEASE_EXPIRED"
    RUN_ORPHANED_CREATED = "RUN_ORPHANED_CREATED"
    WORKFLOW_TASK_ATTEMPT_LOST = "WORKFLOW_TASK_ATTEMPT_LOST"
    EXECUTION_FAILED = "EXECUTION_FAILED"  # a completion with outcome `failed` (§1.2)
    WORKFLOW_STEP_FAILED = "WORKFLOW_STEP_FAILED"  # a Workflow ended with a step not succeeded
    WORKFLOW_DEPENDENCY_FAILED = "WORKFLOW_DEPENDENCY_FAILED"  # a step whose dependency failed
    WORKFLOW_TASK_NEVER_LAUNCHED = "WORKFLOW_TASK_NEVER_LAUNCHED"  # prepared, never launched
    # -- lost retry failure codes (taken from the records) ---------------------------------
    RUN_LOST_RETRY_DISABLED = "RUN_LOST_RETRY_DISABLED"
    RUN_LOST_RETRY_UNSAFE = "RUN_LOST_RETRY_UNSAFE"
    RUN_LOST_RETRY_EXHAUSTED = "RUN_LOST_RETRY_EXHAUSTED"
    # -- Run-domain rejections (Appendix A, decision) -------------------------------------
    CLOCK_REGRESSION = "CLOCK_REGRESSION"
    NOT_ELIGIBLE = "NOT_ELIGIBLE"
    NOT_DUE = "NOT_DUE"
    COMPLETION_CONFLICT = "COMPLETION_CONFLICT"
    WORKER_UNAVAILABLE = "WORKER_UNAVAILABLE"
    LEASE_MISSING = "LEASE_MISSING"
    LEASE_RUN_MISMATCH = "LEASE_RUN_MISMATCH"
    LEASE_WORKER_MISMATCH = "LEASE_WORKER_MISMATCH"
    LEASE_WORKER_SESSION_MISMATCH = "LEASE_WORKER_SESSION_MISMATCH"
    LEASE_WORKER_GENERATION_MISMATCH = "LEASE_WORKER_GENERATION_MISMATCH"
    LEASE_GENERATION_MISMATCH = "LEASE_GENERATION_MISMATCH"
    LEASE_TOKEN_MISMATCH = "LEASE_TOKEN_MISMATCH"
    LEASE_NOT_LEASED = "LEASE_NOT_LEASED"
    LEASE_VERSION_MISMATCH = "LEASE_VERSION_MISMATCH"
    RUN_RETRY_POLICY_NOT_ADMISSIBLE = "RUN_RETRY_POLICY_NOT_ADMISSIBLE"
    RUN_RETRY_POLICY_UNSAFE = "RUN_RETRY_POLICY_UNSAFE"
    INVALID_RUN_RETRY_POLICY = "INVALID_RUN_RETRY_POLICY"
    # -- rejections added by this implementation (docs/decisions.md) -----------------------
    RUN_NOT_FOUND = "RUN_NOT_FOUND"
    ATTEMPT_NOT_FOUND = "ATTEMPT_NOT_FOUND"
    ATTEMPT_NOT_LATEST = "ATTEMPT_NOT_LATEST"
    INVALID_TRANSITION = "INVALID_TRANSITION"
    RUN_ID_CONFLICT = "RUN_ID_CONFLICT"
    ATTEMPT_ID_CONFLICT = "ATTEMPT_ID_CONFLICT"
    NOT_RUNTIME_OWNED = "NOT_RUNTIME_OWNED"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    EXECUTOR_TYPE_MISMATCH = "EXECUTOR_TYPE_MISMATCH"
    CALLBACK_SEQUENCE_STALE = "CALLBACK_SEQUENCE_STALE"
    HANDLE_CONFLICT = "HANDLE_CONFLICT"
    START_TIME_INVALID = "START_TIME_INVALID"
    RECEIPT_UNAUTHENTICATED = "RECEIPT_UNAUTHENTICATED"
    STOP_NOT_APPLICABLE = "STOP_NOT_APPLICABLE"
    LEASE_DURATION_INVALID = "LEASE_DURATION_INVALID"
    RUN_TERMINAL = "RUN_TERMINAL"
    LIVE_EXECUTION = "LIVE_EXECUTION"
    NO_CANCEL_INTENT = "NO_CANCEL_INTENT"
    RECOVERY_NOT_APPLICABLE = "RECOVERY_NOT_APPLICABLE"
    STARTUP_NOT_ORPHANED = "STARTUP_NOT_ORPHANED"
    # -- Workflow rejections (SPEC §4, docs/decisions.md WF-n) --------------------------------
    NOT_A_WORKFLOW = "NOT_A_WORKFLOW"
    STEP_RUN_NOT_FOUND = "STEP_RUN_NOT_FOUND"
    STEP_RUN_EPOCH_MISMATCH = "STEP_RUN_EPOCH_MISMATCH"
    WORKFLOW_PLAN_CONFLICT = "WORKFLOW_PLAN_CONFLICT"
    # -- replay results (Appendix A) ------------------------------------------------------
    ALREADY_TERMINAL = "already_terminal"
    ALREADY_APPLIED = "already_applied"
    ALREADY_RUNNING = "already_running"
    NOT_EXPIRED = "not_expired"
    ALREADY_FINAL = "already_final"
    EVIDENCE_REQUIRED = "evidence_required"
    EXISTING = "existing"
    # -- applied results ------------------------------------------------------------------
    APPLIED = "applied"
    ADMITTED = "admitted"
    GRANTED = "granted"
    COMPLETED = "completed"
    STOPPED = "stopped"
    RELEASED = "released"
    LOST = "lost"
    CANCEL_REQUESTED_APPLIED = "cancel_requested"
    CONVERGED = "converged"
    # -- lost-retry dispositions and counters (Appendix A) ------------------------------------
    SCHEDULED = "scheduled"
    REQUEUED = "requeued"
    FAILED_DISABLED = "failed_disabled"
    FAILED_UNSAFE = "failed_unsafe"
    FAILED_EXHAUSTED = "failed_exhausted"
    RACED = "raced"
    CAS_CONFLICT = "CAS_CONFLICT"
    ERRORED = "errored"
    RETRY_WAIT = "retry_wait"
    # -- component unavailability ---------------------------------------------------------
    LOST_RETRY_UNAVAILABLE = "LOST_RETRY_UNAVAILABLE"
    RUNTIME_RECOVERY_UNAVAILABLE = "RUNTIME_RECOVERY_UNAVAILABLE"
    CANCEL_CONVERGENCE_UNAVAILABLE = "CANCEL_CONVERGENCE_UNAVAILABLE"  # [decision D-6] cluster
    STARTUP_RECOVERY_BUDGET_EXHAUSTED = "STARTUP_RECOVERY_BUDGET_EXHAUSTED"
    # -- recovery evidence (§2.1) ----------------------------------------------------------
    EVIDENCE_COMPLETED = "completed_evidence"
    LIVE = "live"
    NOT_RUNNING = "not_running"
    UNKNOWN = "unknown"
    RECEIPT_CONFLICT = "receipt_conflict"
    RECEIPT_READ_FAILED = "receipt_read_failed"
    HANDLE_MISSING = "handle_missing"
    IDENTITY_MISMATCH = "identity_mismatch"
    UNSUPPORTED = "unsupported"
    PROBE_FAILED = "probe_failed"
    INCONSISTENT_INSPECTIONS = "inconsistent_inspections"
    # -- worker inbox: records' names (Appendix A) --------------------------------------------
    LAUNCH_OUTCOME_UNKNOWN = "launch_outcome_unknown"
    CONTROL_PLANE_TERMINAL = "control_plane_terminal"
    CONTROL_PLANE_ALREADY_RUNNING = "control_plane_already_running"
    LEASE_LOST_LOCAL_EXECUTION_STOPPED = "lease_lost_local_execution_stopped"
    LEASE_LOST_LOCAL_EXECUTION_UNVERIFIED = "lease_lost_local_execution_unverified"
    SETTLED_COMPLETION = "settled_completion"
    NO_LOCAL_EXECUTION = "no_local_execution"
    SETTLED_START_FAILURE = "settled_start_failure"
    LAUNCH_RECONCILIATION = "launch_reconciliation"
    EXECUTION_RECONCILIATION = "execution_reconciliation"
    READY = "ready"
    RECONCILIATION_REQUIRED = "reconciliation_required"
    NEW_CLAIM = "new_claim"
    LEASE_RECOVERY = "lease_recovery"
    CURRENT = "current"
    SESSION_FENCED = "session_fenced"
    WORKER_OFFLINE_AUTHORITY = "worker_offline"
    WORKER_SESSION_EXPIRED_AUTHORITY = "worker_session_expired"
    RUN_LEASE_EXPIRED_AUTHORITY = "run_lease_expired"
    COMPLETION_OBSERVED = "completion_observed"
    RUNNING_OBSERVED = "running_observed"
    BLOCKED = "blocked"
    TERMINATION_REQUESTED = "termination_requested"
    ALREADY_EXITED = "already_exited"
    # -- worker inbox: journal and delivery codes (Appendix A, decision) -----------------------
    OFFER_INVALID = "OFFER_INVALID"
    OFFER_ID_MISMATCH = "OFFER_ID_MISMATCH"
    OFFER_DIGEST_MISMATCH = "OFFER_DIGEST_MISMATCH"
    OFFER_IDENTITY_DRIFT = "OFFER_IDENTITY_DRIFT"
    OFFER_CONFLICT = "OFFER_CONFLICT"
    WORKER_SESSION_MISMATCH = "WORKER_SESSION_MISMATCH"
    WORKER_OFFLINE = "WORKER_OFFLINE"
    WORKER_SESSION_EXPIRED = "WORKER_SESSION_EXPIRED"
    RUN_LEASE_EXPIRED = "RUN_LEASE_EXPIRED"
    WORKER_DRAINING = "WORKER_DRAINING"
    JOURNAL_FULL = "JOURNAL_FULL"
    JOURNAL_RECORD_TOO_LARGE = "JOURNAL_RECORD_TOO_LARGE"
    JOURNAL_RECORD_EXISTS = "JOURNAL_RECORD_EXISTS"
    JOURNAL_REVISION_CONFLICT = "JOURNAL_REVISION_CONFLICT"
    JOURNAL_TRANSITION_INVALID = "JOURNAL_TRANSITION_INVALID"
    JOURNAL_CORRUPT = "JOURNAL_CORRUPT"
    JOURNAL_PERMISSIONS = "JOURNAL_PERMISSIONS"
    JOURNAL_NOT_OWNED = "JOURNAL_NOT_OWNED"
    JOURNAL_LOCKED = "JOURNAL_LOCKED"
    JOURNAL_COMPROMISED = "JOURNAL_COMPROMISED"
    AUDIT_CURSOR_INVALID = "AUDIT_CURSOR_INVALID"
    AUDIT_BUDGET_EXHAUSTED = "AUDIT_BUDGET_EXHAUSTED"
    AUDIT_JOURNAL_CORRUPT = "AUDIT_JOURNAL_CORRUPT"
    RECOVERY_ACTION_BUDGET_EXHAUSTED = "RECOVERY_ACTION_BUDGET_EXHAUSTED"  # §3.13 [decision]
    # -- worker runtime (runners/worker, decisions WR-n) ------------------------------------
    CONTROL_PLANE_UNAVAILABLE = "CONTROL_PLANE_UNAVAILABLE"  # the client could not ask
    ACK_VERSION_RETRIES_EXHAUSTED = "ACK_VERSION_RETRIES_EXHAUSTED"  # §3.5: 3 tries in all
    PREPARE_FAILED = "PREPARE_FAILED"  # §3.5 step 6 refused (start_failure_code)
    START_REFUSED = "START_REFUSED"  # Executor.start() refused explicitly (start_failure_code)
    # -- tasks and schedules (issue 15, kernel/task, decisions TK-n) -----------------------
    TASK_NAME_INVALID = "TASK_NAME_INVALID"
    TASK_ARGV_INVALID = "TASK_ARGV_INVALID"
    TASK_CWD_INVALID = "TASK_CWD_INVALID"
    TASK_ENV_INVALID = "TASK_ENV_INVALID"
    TASK_CRON_INVALID = "TASK_CRON_INVALID"
    TASK_DEADLINE_INVALID = "TASK_DEADLINE_INVALID"
    TASK_NOT_FOUND = "TASK_NOT_FOUND"
    TASK_REMOVED = "TASK_REMOVED"
    # -- Approved Action (Appendix A) -----------------------------------------------------
    CURSOR_STALLED = "cursor_stalled"
    PAGE_LIMIT = "page_limit"
    COMPLETE = "complete"
    PROFILE_NOT_SUPPORTED = "PROFILE_NOT_SUPPORTED"
    # -- The approval domain behind the Approved Action ports (issue 19, decision AA-D1) ---
    ACTION_NOT_FOUND = "ACTION_NOT_FOUND"
    ACTION_ID_CONFLICT = "ACTION_ID_CONFLICT"  # a request whose id holds another request
    ACTION_NOT_PENDING = "ACTION_NOT_PENDING"  # approve/deny after the decision
    ACTION_NOT_APPROVED = "ACTION_NOT_APPROVED"  # claim of an action not approved
    ACTION_NOT_STARTING = "ACTION_NOT_STARTING"  # start/resolve of an action not behind the barrier
    ACTION_RUN_MISMATCH = "ACTION_RUN_MISMATCH"  # the Run under the action's id is another Run
    START_INTERRUPTED = "START_INTERRUPTED"  # the barrier was written, the Run never admitted
    TASK_APPROVAL_UNSUPPORTED = "TASK_APPROVAL_UNSUPPORTED"  # approval with --cron (AA-D4)
    REQUESTED = "requested"
    APPROVED = "approved"
    DENIED = "denied"
    CLAIMED = "claimed"
    STARTED = "started"
    VERIFIED_STARTED = "verified_started"
    VERIFIED_NOT_STARTED = "verified_not_started"
    EVIDENCE_CONTRADICTED = "evidence_contradicted"  # an action left for a person (AA-D2)
