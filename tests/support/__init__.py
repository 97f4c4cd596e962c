"""Shared test support: a kernel simulator that reaches states through real transitions."""
