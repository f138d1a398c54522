"""The TensorFlow tutorials' shape: Keras `model.fit` under a distribution strategy.

    el_submit -t tensorflow-worker -wn 2 --env TF_USE_LEGACY_KERAS=1 -f ./ \\
        -c python keras_fit.py                       # MultiWorkerMirroredStrategy
    el_submit -t tensorflow-ps -pn 1 -wn 3 -x True --env TF_USE_LEGACY_KERAS=1 -f ./ \\
        -c python keras_fit.py                       # ParameterServerStrategy

Keras 3 (`tf.keras` in TF 2.16 and later) cannot `fit` under either strategy; Keras 2 can:
`pip install 'tfyarn[keras]'` (the `tf-keras` package, in the job's environment) and
`TF_USE_LEGACY_KERAS=1` in the tasks' env make `tf.keras` Keras 2 again. Without them
tfyarn's failure message says so. The data is made up (no download): y = a fixed linear
function of x, so the loss falls quickly. Prints `final_loss=...` at the end (the chief,
or every MultiWorkerMirroredStrategy worker).
"""

from __future__ import annotations

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

FEATURES, BATCH, STEPS, EPOCHS = 8, 64, 20, 3


def dataset(_context: object = None) -> tf.data.Dataset:
    x = tf.random.stateless_normal((BATCH * STEPS, FEATURES), seed=(1, 2))
    y = tf.reduce_sum(x * tf.range(1.0, FEATURES + 1.0), axis=1, keepdims=True)
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(1024).repeat().batch(BATCH)


def model() -> tf.keras.Model:
    m = tf.keras.Sequential([tf.keras.layers.Dense(16, activation="relu"),
                             tf.keras.layers.Dense(1)])
    m.compile(optimizer=tf.keras.optimizers.Adam(0.05), loss="mse")
    return m


def fit(strategy: tf.distribute.Strategy, data: object) -> float:
    with strategy.scope():
        m = model()
    history = m.fit(data, epochs=EPOCHS, steps_per_epoch=STEPS, verbose=2)
    return float(history.history["loss"][-1])


def main() -> None:
    role = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("type")
    if role in ("ps", "worker") and "ps" in json.loads(os.environ["TF_CONFIG"])["cluster"]:
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        tf.distribute.Server(resolver.cluster_spec(), job_name=role,
                             task_index=resolver.task_id, protocol="grpc").join()
        return  # never: tfyarn stops ps and workers once the chief is done (-x True)
    if role == "chief":
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        strategy = tf.distribute.ParameterServerStrategy(resolver)
        loss = fit(strategy, tf.keras.utils.experimental.DatasetCreator(dataset))
    else:
        loss = fit(tf.distribute.MultiWorkerMirroredStrategy(), dataset())
    print(f"final_loss={loss:.4f}", flush=True)


if __name__ == "__main__":
    main()
