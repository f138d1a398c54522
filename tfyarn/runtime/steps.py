"""Training progress, from a task to its launcher to the driver (`tfyarn.progress`).

Heartbeats prove that a launcher lives, not that training moves: a hung collective or a
deadlocked input pipeline keeps every process alive. A task that calls `progress(step)`
says how far it is; `--stall-timeout` fails (and restarts) a job whose reporting tasks
stopped moving, and the page and the status show each task's step and rate.

Owns both ends of the hand-over: the task overwrites one small record in a file its
launcher names (TFYARN_STEPS_FILE), through a memory map, at every call, and the launcher
reads it with each heartbeat and puts a changed one in the store (`steps/<task>`).
Must not import TensorFlow or anything heavy, start threads or take locks in the task
(a call costs microseconds; a forking user process stays safe).
"""

from __future__ import annotations

import json
import math
import mmap
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tfyarn.core.records import StepReport

ENV = "TFYARN_STEPS_FILE"  # set by the launcher for each task
RECORD_BYTES = 1024  # the record's room at the file's start (metrics beyond it are cut)


@dataclass
class _Reporter:
    """The task's end: the file, mapped (a report is a memory write, no system call)."""

    map: mmap.mmap
    first: str = ""  # this process's first step and its time: where it resumed from
    numbers: str = "{}"  # the metrics last reported, each kept until reported again
    latest: dict[str, float] = field(default_factory=dict)

    def write(self, step: int, total: int | None, metrics: Mapping[str, Any]) -> None:
        now = f"{int(step)}\t{time.time():.3f}"
        self.first = self.first or now
        if metrics:  # one reported now and then (an epoch's loss) stays the latest
            self.latest.update((k, float(v)) for k, v in metrics.items() if _number(v))
            self.numbers = json.dumps(self.latest)
        numbers = self.numbers
        of = "" if total is None else int(total)
        line = f"{now}\t{self.first}\t{numbers}\t{of}".encode()
        if len(line) >= RECORD_BYTES:
            line = f"{now}\t{self.first}\t{{}}\t{of}".encode()
        self.map[:] = line.ljust(RECORD_BYTES - 1) + b"\n"


_reporter: _Reporter | None = None
_opened = False


def progress(step: int, total: int | None = None, **metrics: float) -> None:
    """Report this task's training step (and numbers such as `loss=0.3`); call it every
    step (a few microseconds). `total`: the steps the training will run, for the ETA
    el_submit and the job page show. Outside a tfyarn task it does nothing."""
    global _reporter, _opened
    if not _opened:
        _opened = True
        _reporter = _open(os.environ.get(ENV))
    if _reporter is not None:
        _reporter.write(step, total, metrics)


def _open(path: str | None) -> _Reporter | None:
    if not path:
        return None
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, RECORD_BYTES)
        return _Reporter(mmap.mmap(fd, RECORD_BYTES))
    finally:
        os.close(fd)  # the mapping keeps the file


def _number(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False


def keras_callback() -> Any:
    """A Keras callback reporting each batch's end (steps counted across epochs) and its
    loss: `model.fit(..., callbacks=[tfyarn.progress_callback()])`. Built on first use
    from the Keras `tf.keras` means here: Keras 2 (tf_keras) with TF_USE_LEGACY_KERAS=1,
    else Keras 3."""
    if os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes"):
        import tf_keras as keras
    else:
        import keras

    class ProgressCallback(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.step = 0

        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            self.step += 1
            numbers = {k: v for k, v in (logs or {}).items() if k != "total"}
            params = self.params or {}
            steps, epochs = params.get("steps"), params.get("epochs")
            total = steps * epochs if steps and epochs else None  # fit's own plan: an ETA
            progress(self.step, total, **numbers)  # what is not a number is left out there

    return ProgressCallback()


# ---------------------------------------------------------------- the launcher's end


def path_for(workdir: str, task: str) -> str:
    """The file a task reports to (one per task: several may share a container)."""
    return os.path.join(workdir, f".tfyarn-steps-{task.replace(':', '-')}")


def read(path: str, before: StepReport | None) -> StepReport | None:
    """The task's record, with its rate since `before`; None when it never reported,
    or wrote nothing new since `before`."""
    try:
        with open(path, "rb") as f:
            raw = f.read(RECORD_BYTES).decode(errors="replace").rstrip(" \n\0")  # not a tab
    except OSError:
        return None
    parts = raw.split("\t")
    if len(parts) != 6:
        return None  # never written, or caught mid-write: the next beat reads it
    try:
        step, at, first, first_at = int(parts[0]), float(parts[1]), int(parts[2]), \
            float(parts[3])
        metrics = json.loads(parts[4])
        total = int(parts[5]) if parts[5] else None
    except ValueError:
        return None
    if before is not None and (step, at) == (before.step, before.time):
        return None
    since = before if before is not None and before.time >= first_at else None
    step0, at0 = (since.step, since.time) if since else (first, first_at)
    rate = (step - step0) / (at - at0) if at > at0 and step >= step0 else \
        (before.rate if before is not None else 0.0)
    return StepReport(step, at, round(rate, 3), {k: float(v) for k, v in metrics.items()},
                      first, first_at, total)
