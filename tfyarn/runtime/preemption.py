"""YARN's preemption notice, from the driver to each task: a checkpoint instead of lost work.

The CapacityScheduler marks the containers it will take and waits (its
`max_wait_before_kill`, 15 s by default) before it kills them. skein's AM puts the notice
in the store (patch 0005), the driver passes it to the gang (`preempting/<n>`), and each
launcher touches one file in its container (TFYARN_PREEMPTION_FILE) and, where the job
asks for one (TFYARN_PREEMPTION_SIGNAL in its env, e.g. USR1), signals its tasks.

A task asks `tfyarn.preempting()`: a stat of that file, no TensorFlow, a few microseconds.
It is true from the notice for PREEMPTION_HOLD_S; a kill that has not come by then will
not (the RM changed its mind), and training goes on. Ready-made ends:
`tfyarn.preempting` is itself a `termination_watcher_fn` for TensorFlow's
PreemptionCheckpointHandler, and `tfyarn.preemption_callback(save)` is a Keras callback
that saves once at the notice and holds training until the kill.

Owns both ends of the hand-over (the task's and the launcher's), as `steps` does for
progress. Must not import TensorFlow or anything heavy at import, nor start threads in
the task.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from tfyarn.core.timing import PREEMPTION_HOLD_POLL_S, PREEMPTION_HOLD_S

ENV = "TFYARN_PREEMPTION_FILE"  # set by the launcher for each task
SIGNAL_ENV = "TFYARN_PREEMPTION_SIGNAL"  # the job's choice (--env): a signal name, e.g. USR1
FILE = ".tfyarn-preempting"  # in the container's working dir: one per container

_path: str | None = None
_looked = False


def preempting() -> bool:
    """Whether YARN has said it will preempt this job's containers (a checkpoint now
    saves the work since the last one). False outside a tfyarn task, and again once
    PREEMPTION_HOLD_S passed without the kill. Cheap enough to call every step."""
    global _path, _looked
    if not _looked:
        _looked = True
        _path = os.environ.get(ENV) or None
    if _path is None:
        return False
    try:
        told = os.stat(_path).st_mtime
    except OSError:
        return False
    return time.time() < told + PREEMPTION_HOLD_S


def keras_callback(save: Callable[[int], Any]) -> Any:
    """A Keras callback for `model.fit`: at YARN's preemption notice it calls
    `save(step)` once (e.g. `lambda step: manager.save(step)`, or the model's
    `save_weights`), says so in the task's log, and holds training until the kill (or
    until the notice lapses: then training goes on). Steps count across epochs."""
    if os.environ.get("TF_USE_LEGACY_KERAS", "").lower() in ("1", "true", "yes"):
        import tf_keras as keras
    else:
        import keras

    class PreemptionCallback(keras.callbacks.Callback):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.step = 0
            self.saved = False

        def on_train_batch_end(self, batch: int, logs: dict | None = None) -> None:
            self.step += 1
            if not preempting():
                self.saved = False
                return
            if not self.saved:
                save(self.step)
                self.saved = True
                print(f"tfyarn: saved a checkpoint at step {self.step} after YARN's "
                      "preemption notice; holding until the containers are taken",
                      file=sys.stderr, flush=True)
            hold()

    return PreemptionCallback()


def hold() -> None:
    """Wait while the notice stands: until YARN kills the container, or it lapses."""
    while preempting():
        time.sleep(PREEMPTION_HOLD_POLL_S)


# ---------------------------------------------------------------- the launcher's end


def path_for(workdir: str) -> str:
    return os.path.join(workdir, FILE)


def tell(path: str, words: str, pids: Iterable[int], signame: str | None) -> str | None:
    """Touch the notice file (written whole: renamed in) and signal the tasks' processes
    where the job named a signal; why the signal was not sent, if it was not."""
    temp = f"{path}.tmp"
    with open(temp, "w", encoding="utf-8") as f:
        f.write(words + "\n")
    os.replace(temp, path)
    if not signame:
        return None
    try:
        sig = signal.Signals[signame if signame.startswith("SIG") else f"SIG{signame}"]
    except KeyError:
        return f"{SIGNAL_ENV}={signame} is not a signal name (e.g. USR1): none was sent"
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue
    return None


def forget(path: str) -> None:
    """An earlier run's notice in this dir is not this run's."""
    try:
        os.remove(path)
    except FileNotFoundError:
        return
