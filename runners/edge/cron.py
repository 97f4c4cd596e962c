"""Cron iteration for the schedule phase (issue 15; TK-3): moved to `runners.cron`, shared with
the cluster runner's task store; this name stays for the edge runner and its callers."""

from __future__ import annotations

from runners.cron import MINUTE_MS, cron_refusal, first_fire_after, latest_fire_at_or_before

__all__ = ["MINUTE_MS", "cron_refusal", "first_fire_after", "latest_fire_at_or_before"]
