-- Reads of `qlk status --dsn` and `qlk serve --profile cluster` (runners/cluster/status.py).

-- name: run_status_counts
-- How many Runs are in each status (statuses with no Run are absent): one aggregate over the
-- runs table, as the local `run_status_counts` is.
SELECT status, count(*) FROM runs GROUP BY status;
