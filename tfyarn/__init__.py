"""tfyarn: TensorFlow (and friends) on Hadoop YARN with an el_submit-compatible CLI, and a
Python API (`tfyarn.submit`, `tfyarn.attach`, `tfyarn.jobs`, `Job`: see `tfyarn.api`).

The API's names load on first use, so every task's `import tfyarn` stays light.
Must not import anything heavy (skein, TensorFlow, a JVM): `el_submit --help` stays instant.
"""

from typing import Any

__version__ = "0.1.0"
API = ("submit", "attach", "jobs", "run", "Job", "JobStatus", "JobFailed", "SpecError")


# what a task calls: no API, no client loaded
TASK = ("progress", "progress_callback", "preempting", "preemption_callback")


def __getattr__(name: str) -> Any:
    if name in API:
        from tfyarn import api

        return getattr(api, name)
    if name in TASK:
        from tfyarn.runtime import preemption, steps

        value = {"progress": steps.progress, "progress_callback": steps.keras_callback,
                 "preempting": preemption.preempting,
                 "preemption_callback": preemption.keras_callback}[name]
        globals()[name] = value  # looked up once: a call per step costs no lookup
        return value
    raise AttributeError(f"module 'tfyarn' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *API, *TASK])
