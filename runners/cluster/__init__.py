"""Cluster runner on PostgreSQL with psycopg 3 (issue 5)."""
