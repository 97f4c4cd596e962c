"""The kernel domain as data: states, tables, invariants, limits, budgets, codes, properties."""
