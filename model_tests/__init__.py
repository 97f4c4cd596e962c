"""Model tests of the Run domain (issue 3): Hypothesis state machines over the reference store,
an exhaustive small-scope enumeration, and a deep model-checking command
(`python -m model_tests.deep`). Every machine run can be written as a conformance trace."""
