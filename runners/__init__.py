"""Storage runners: thin adapters that load, call the kernel and persist its effects."""
