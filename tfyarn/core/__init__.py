"""Pure core: the job model, topology (TF_CONFIG), policy (outcome, restarts, exit
codes), errors, settings, timings, the one `say`. Standard library only; no I/O but a
line to stderr.

Must not import anything but the standard library (checked by import-linter), nor do I/O.
"""
