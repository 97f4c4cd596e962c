"""The edge runner's candidate source statements (`sql/sources.sql`), looked up by name at
execution time by `EdgeStore._source_rows`; the page logic every SQL store shares is
`runners.sql_sources.SqlSources`. (Planted-bug tests replace `SOURCES` here.)"""

from __future__ import annotations

from runners.edge.named_sql import SOURCES

__all__ = ["SOURCES"]
