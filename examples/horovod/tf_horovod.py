"""Horovod with TensorFlow under tfyarn: data-parallel training with DistributedGradientTape.

    el_submit -t tensorflow-mpi -wn 2 -ppn 2 -f ./ -c python tf_horovod.py   # 4 ranks

tfyarn starts the ranks and serves Horovod's gloo rendezvous from the driver, so
`hvd.init()` needs no MPI, ssh or horovodrun. Each rank trains a small Keras model on its
own shard of synthetic data (a custom loop: Keras 3's fit does not take Horovod's
optimizer wrapper); gradients are averaged with allreduce, and every rank prints the
same loss and weight checksum at the end.
"""

from __future__ import annotations

import argparse

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf


def broadcast(variables: list) -> None:
    """Rank 0's values everywhere. (Horovod 0.28's broadcast_variables calls `.ref()`,
    which Keras 3 variables lack, so each value is broadcast and assigned.)"""
    for i, v in enumerate(variables):
        v.assign(hvd.broadcast(tf.convert_to_tensor(v), root_rank=0, name=f"bcast_{i}"))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=40)
    args = p.parse_args()
    hvd.init()
    for gpu in tf.config.list_physical_devices("GPU"):
        tf.config.experimental.set_memory_growth(gpu, True)

    total = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum)
    print(f"rank={hvd.rank()} size={hvd.size()} local_rank={hvd.local_rank()} "
          f"allreduced={float(total[0]):g}", flush=True)

    rng = np.random.default_rng(hvd.rank())  # each rank its own shard
    true_w = np.arange(8, dtype=np.float32)
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(1)])
    opt = tf.keras.optimizers.SGD(0.05 * hvd.size())
    first = True
    for _ in range(args.steps):
        x = rng.normal(size=(64, 8)).astype(np.float32)
        y = x @ true_w
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.squeeze(model(x), 1) - y))
        tape = hvd.DistributedGradientTape(tape)
        # the tf.Variables behind Keras 3's variables: Horovod 0.28 keys them by .ref()
        grads = tape.gradient(loss, [v.value for v in model.trainable_variables])
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        if first:  # start every rank from rank 0's weights
            broadcast(model.variables + opt.variables)
            first = False
    mean_loss = hvd.allreduce(loss, op=hvd.Average)
    checksum = sum(float(tf.reduce_sum(v)) for v in model.trainable_variables)
    print(f"rank={hvd.rank()} loss={float(mean_loss):.4f} checksum={checksum:.5f}", flush=True)


if __name__ == "__main__":
    main()
