"""Keras users: the tutorials' `model.fit` under MultiWorkerMirroredStrategy and
ParameterServerStrategy, locally with real TF: Keras 2 (tf-keras) trains; Keras 3 fails
with a message that says what to install and set."""

from __future__ import annotations

import re

from conftest import REPO

from tfyarn.core.policy import KERAS_2

EXAMPLE = REPO / "examples" / "keras"
LEGACY = ("--env", "TF_USE_LEGACY_KERAS=1")


def losses(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"final_loss=([0-9.]+)", text)]


def test_model_fit_under_multi_worker_mirrored_strategy_with_keras_2(el_submit):
    out = el_submit("-t", "tensorflow-worker", "-wn", "2", *LEGACY, "-f", f"{EXAMPLE}/.",
                    "--local", "-c", "python keras_fit.py", timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    found = losses(out.stderr)
    assert len(found) == 2 and max(found) < 5.0, found  # y's variance is 204: it learned


def test_model_fit_under_parameter_server_strategy_with_keras_2(el_submit):
    out = el_submit("-t", "tensorflow-ps", "-pn", "1", "-wn", "3", "-x", "True", *LEGACY,
                    "-f", f"{EXAMPLE}/.", "--local", "-c", "python keras_fit.py", timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    found = losses(out.stderr)
    assert len(found) == 1 and found[0] < 5.0, found


def test_keras_3_fails_saying_what_to_install_and_set(el_submit):
    out = el_submit("-t", "tensorflow-worker", "-wn", "2", "-f", f"{EXAMPLE}/.", "--local",
                    "-c", "python keras_fit.py", timeout=300)
    assert out.returncode == 1, out.stderr[-3000:]
    verdict = next(x for x in out.stderr.splitlines() if " FAILED: " in x)
    assert verdict.endswith(f"({KERAS_2})"), verdict


HOROVOD_TAPE = """\
import horovod.tensorflow as hvd, tensorflow as tf
hvd.init()
m = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
with tf.GradientTape() as tape:
    loss = tf.reduce_mean((m(tf.ones((4, 2))) - 1.0) ** 2)
grads = hvd.DistributedGradientTape(tape).gradient(loss, m.trainable_variables)
tf.keras.optimizers.SGD(0.1).apply_gradients(zip(grads, m.trainable_variables))
print("TAPE OK", flush=True)
"""


def test_horovod_on_keras_3_fails_saying_what_to_install_and_set(el_submit, tmp_path):
    """Horovod's own TF2 shape (DistributedGradientTape) fails on Keras 3's variables
    (`'Variable' object has no attribute 'ref'`), and trains once the message's advice
    is taken."""
    (tmp_path / "tape.py").write_text(HOROVOD_TAPE)
    out = el_submit("-t", "tensorflow-mpi", "-wn", "1", "-f", "tape.py", "--local", "-c",
                    "python tape.py", timeout=300)
    assert out.returncode == 1, out.stderr[-3000:]
    verdict = next(x for x in out.stderr.splitlines() if " FAILED: " in x)
    assert verdict.endswith(f"({KERAS_2})"), out.stderr[-3000:]
    advised = el_submit("-t", "tensorflow-mpi", "-wn", "1", *LEGACY, "-f", "tape.py", "--local",
                        "-c", "python tape.py", timeout=300)
    assert advised.returncode == 0 and "TAPE OK" in advised.stderr, advised.stderr[-3000:]


FIT = """
import os
import numpy as np, tfyarn
from tfyarn.runtime import steps
keras = __import__("tf_keras" if os.environ.get("TF_USE_LEGACY_KERAS") else "keras")
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
x = np.random.rand(64, 3).astype("float32")
model.fit(x, x.sum(1), batch_size=16, epochs=2, verbose=0,
          callbacks=[tfyarn.progress_callback()])
r = steps.read(os.environ[steps.ENV], None)
print("REPORT", r.step, sorted(r.metrics))
"""


def test_the_keras_callback_reports_every_batch_in_both_kerases(tmp_path):
    """`tfyarn.progress_callback()` in `model.fit`, Keras 3 and Keras 2 (tf-keras):
    2 epochs of 4 batches are step 8, with the loss."""
    import os
    import subprocess
    import sys

    for legacy in ("", "1"):
        env = {**os.environ, "TFYARN_STEPS_FILE": str(tmp_path / f"steps{legacy}")}
        env.pop("TF_USE_LEGACY_KERAS", None)
        if legacy:
            env["TF_USE_LEGACY_KERAS"] = legacy
        out = subprocess.run([sys.executable, "-c", FIT], capture_output=True, text=True,
                             timeout=300, env=env)
        assert out.returncode == 0, out.stderr[-3000:]
        assert "REPORT 8 ['loss']" in out.stdout, (legacy, out.stdout, out.stderr[-2000:])


FIT_AT_NOTICE = """
import os, sys
import numpy as np, tfyarn
keras = __import__("tf_keras" if os.environ.get("TF_USE_LEGACY_KERAS") else "keras")
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
model.compile("sgd", "mse")
x = np.random.rand(64, 3).astype("float32")
saved = []
model.fit(x, x.sum(1), batch_size=16, epochs=2, verbose=0,
          callbacks=[tfyarn.preemption_callback(saved.append)])
print("SAVED", saved, "STEPS", model.optimizer.iterations.numpy())
"""


def test_the_keras_preemption_callback_saves_once_holds_and_trains_on_in_both_kerases(
        tmp_path):
    """`tfyarn.preemption_callback(save)` in `model.fit` with a notice already there, whose
    hold the test lapses once the task says it holds (the RM changed its mind): `save(1)`
    once, said in the log, a hold, then the other 7 batches. The notice is dated ahead, so
    however long TF's import takes, it is still in force at the first batch (a notice
    lapsing 12 s after the start failed where the import took longer)."""
    import os
    import subprocess
    import sys
    import time

    from tfyarn.core.timing import PREEMPTION_HOLD_S
    from tfyarn.runtime import preemption

    told = tmp_path / preemption.FILE
    holding = ("tfyarn: saved a checkpoint at step 1 after YARN's preemption notice; holding "
               "until the containers are taken")
    for legacy in ("", "1"):
        preemption.tell(str(told), "YARN's preemption notice for worker-0 (strict)", [], None)
        ahead = time.time() + 600
        os.utime(told, (ahead, ahead))
        env = {**os.environ, preemption.ENV: str(told)}
        env.pop("TF_USE_LEGACY_KERAS", None)
        if legacy:
            env["TF_USE_LEGACY_KERAS"] = legacy
        proc = subprocess.Popen([sys.executable, "-c", FIT_AT_NOTICE], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env)
        try:
            err = []
            for line in proc.stderr:  # to its end if it never holds: then it never blocks
                err.append(line)
                if holding in line:
                    lapsed = time.time() - PREEMPTION_HOLD_S - 1
                    os.utime(told, (lapsed, lapsed))
                    break
            out, rest = proc.communicate(timeout=300)
        finally:
            proc.kill()
        stderr = "".join(err) + rest
        assert proc.returncode == 0, stderr[-3000:]
        assert "SAVED [1] STEPS 8" in out, (legacy, out, stderr[-2000:])
        assert holding in stderr, stderr[-2000:]
