"""`tfyarn.spark`: Spark to training in one program, as `pl_submit` runs it.

    from tfyarn.spark import Program, fit

`Program` (from `tfyarn.data.program`) is the class to derive from; `fit(file, ...)` runs
a program file (`tfyarn.api.pipeline.fit`). Loads nothing heavy until `fit` is called.
Must not hold logic of its own.
"""

from __future__ import annotations

from typing import Any

from tfyarn.data.program import Context, Program

__all__ = ["Context", "Program", "fit"]


def fit(program: Any, **options: Any) -> Any:
    """See `tfyarn.api.pipeline.fit`."""
    from tfyarn.api.pipeline import fit as run

    return run(program, **options)
