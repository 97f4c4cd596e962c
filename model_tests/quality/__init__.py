"""The quality tier (issue 3): planted kernel bugs that the model tests must find.

`mutants` is the registry of mutated kernel transitions (each a copy of the real code with one
change, applied as a context manager); `hunt` runs the models under the active profile's budget
against one mutant and reports what caught it, after how many steps and seconds.
"""
