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


HOROVOD_ON_KERAS_3 = ("import horovod.tensorflow as hvd, tensorflow as tf; hvd.init(); "
                      "m = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)]);"
                      " hvd.broadcast_variables(m.variables, root_rank=0)")


def test_horovod_on_keras_3_fails_saying_what_to_install_and_set(el_submit):
    """Horovod 0.28's TF helpers call `.ref()` on variables, which Keras 3's lack."""
    import shlex

    out = el_submit("-t", "tensorflow-mpi", "-wn", "1", "--local", "-c",
                    shlex.join(["python", "-c", HOROVOD_ON_KERAS_3]), timeout=300)
    assert out.returncode == 1, out.stderr[-3000:]
    verdict = next(x for x in out.stderr.splitlines() if " FAILED: " in x)
    assert verdict.endswith(f"({KERAS_2})"), out.stderr[-3000:]
