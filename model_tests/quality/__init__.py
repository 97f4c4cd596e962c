"""The quality tier (issue 3): planted kernel bugs that the model tests must find.

`mutants` is the registry of planted bugs (each an exact edit of the real kernel source, a
`plant.SourcePatch`, planted in process as a context manager); `hunt` runs the models under the
active profile's budget against one mutant and reports what caught it, after how many steps and
seconds. `plant` is the planting mechanism; `plant_plugin` plants a named entry of `plants` at
load time for a whole pytest run (`QL3_PLANT=<name>`, `-p model_tests.quality.plant_plugin`).
"""
