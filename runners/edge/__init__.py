"""Edge/standalone runner on stdlib sqlite3 (issue 4)."""
