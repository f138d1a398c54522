"""Census income Wide & Deep on UCI Adult, for TF 2.21 + Keras 3 (no tf.estimator).

One script, every way el_submit runs it:
  - plain `python census_single.py` (or -t standalone): trains in this process;
  - -t tensorflow-ps with workers: the chief drives ParameterServerStrategy through a
    ClusterCoordinator custom loop (Keras 3 `model.fit` does not work under PSS), ps and
    workers serve until tfyarn stops them (-x True);
  - -t tensorflow-ps -wn 1 (chief + ps, no workers): trains on the chief;
  - -t tensorflow-worker -wn N: MultiWorkerMirroredStrategy custom loop on every worker.
Reads adult.data / adult.test (or their .gz, as shipped beside this script: UCI Adult,
CC BY 4.0, see README.md here) from the working dir or --data-dir (anything tf.io.gfile
opens, hdfs:// included). Prints `eval_accuracy=0.xxxx` on its own line at the end.

Exports the trained model to --model-dir (default: tfyarn's TFYARN_MODEL_DIR) as a
SavedModel, with its encoder (encoder.json) beside it; `--score DIR` loads one back (a
local path or hdfs://) and scores adult.test with it, printing `eval_accuracy=` again.

Saves a checkpoint after every epoch in --checkpoint-dir (default: tfyarn's
TFYARN_CHECKPOINT_DIR) and resumes from the latest one, printing `resumed from epoch K`:
so a job restarted by tfyarn (--max-restarts) goes on where it stopped. At YARN's
preemption notice (`tfyarn.preempting()`) the chief saves at the step it is at and holds
until the containers are taken: the restart resumes from that step (`resumed from epoch
K step S`), so a preemption loses no work (single process and PSS; MWMS workers would
each see the notice at another step: TensorFlow's PreemptionCheckpointHandler with
`termination_watcher_fn=tfyarn.preempting` agrees one). Writes TensorBoard
scalars (loss per epoch, eval accuracy) to --tensorboard-dir (default: tfyarn's
TFYARN_TENSORBOARD_DIR, set with -enable_tensorboard True -log_tensorboard DIR).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import time
import zlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np  # noqa: E402

COLUMNS = (
    "age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
    "relationship", "race", "gender", "capital_gain", "capital_loss", "hours_per_week",
    "native_country", "income_bracket",
)
CATEGORICAL = ("workclass", "education", "marital_status", "occupation", "relationship",
               "race", "gender", "native_country", "age_bucket")
CROSSES = (("education", "occupation"), ("age_bucket", "education", "occupation"),
           ("native_country", "occupation"))
NUMERIC = ("age", "education_num", "capital_gain", "capital_loss", "hours_per_week")
AGE_BOUNDARIES = (18, 25, 30, 35, 40, 45, 50, 55, 60, 65)
HASH_BUCKETS = 1000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=".", help="dir (or URL) with adult.data/adult.test")
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--learning-rate", type=float, default=0.002)
    p.add_argument("--synthetic", action="store_true", help="small made-up census-shaped data")
    p.add_argument("--checkpoint-dir", default=os.environ.get("TFYARN_CHECKPOINT_DIR"),
                   help="save each epoch here and resume from the latest (default "
                        "$TFYARN_CHECKPOINT_DIR; none: no checkpoints)")
    p.add_argument("--tensorboard-dir", default=os.environ.get("TFYARN_TENSORBOARD_DIR"),
                   help="write TensorBoard scalars here (default $TFYARN_TENSORBOARD_DIR)")
    p.add_argument("--model-dir", default=os.environ.get("TFYARN_MODEL_DIR"),
                   help="export the trained model here, a SavedModel (default "
                        "$TFYARN_MODEL_DIR; none: no export)")
    p.add_argument("--score", metavar="MODEL_DIR",
                   help="no training: load an exported model and score adult.test with it")
    return p.parse_args(argv)


# ---------------------------------------------------------------- data


def read_text(path: str) -> str:
    """A data file's text: local or any tf.io.gfile URL (hdfs:// included), plain or gzipped
    (`PATH.gz` when PATH itself is absent: the example ships its data gzipped)."""
    if "://" in path:
        import tensorflow as tf

        exists, opener = tf.io.gfile.exists, lambda p: tf.io.gfile.GFile(p, "rb")
    else:
        exists, opener = os.path.exists, lambda p: open(p, "rb")  # noqa: SIM115
    if not exists(path) and exists(path + ".gz"):
        path += ".gz"
    with opener(path) as f:
        data = f.read()
    return (gzip.decompress(data) if path.endswith(".gz") else data).decode("utf-8")


def read_rows(path: str) -> list[dict[str, str]]:
    """Parse an Adult file, skipping what the real files contain besides records: the
    trailing blank line and adult.test's `|1x3 Cross validator` first line."""
    rows = []
    for line in read_text(path).splitlines():
        fields = [x.strip() for x in line.split(",")]
        if len(fields) == len(COLUMNS):
            rows.append(dict(zip(COLUMNS, fields, strict=True)))
    if not rows:
        raise SystemExit(f"no census records in {path}")
    return rows


def synthetic_rows(n: int, seed: int) -> list[dict[str, str]]:
    """Census-shaped rows whose label depends on education, hours, age and capital gain."""
    rng = random.Random(seed)
    edu = ["Bachelors", "HS-grad", "Masters", "Doctorate", "Some-college", "11th"]
    occ = ["Exec-managerial", "Sales", "Craft-repair", "Prof-specialty", "Other-service"]
    rows = []
    for _ in range(n):
        age, hours = rng.randint(17, 80), rng.randint(10, 70)
        e, o = rng.choice(edu), rng.choice(occ)
        gain = rng.choice([0, 0, 0, 5000, 15000])
        score = (e in ("Masters", "Doctorate", "Bachelors")) + (hours > 45) + (35 < age < 60)
        score += (gain > 4000) + (o in ("Exec-managerial", "Prof-specialty"))
        label = ">50K" if score + rng.random() * 0.8 >= 2.5 else "<=50K"
        rows.append(dict(zip(COLUMNS, [str(age), "Private", "1", e, "10", "Married", o, "Husband",
                                       "White", rng.choice(["Male", "Female"]), str(gain), "0",
                                       str(hours), "United-States", label], strict=True)))
    return rows


def load(args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    if args.synthetic:
        return synthetic_rows(4000, 1), synthetic_rows(1000, 2)
    if os.environ.get("TFYARN_DATA"):
        return load_datasets(os.environ["TFYARN_DATA"].split(","), args)
    join = (lambda d, f: f"{d.rstrip('/')}/{f}") if "://" in args.data_dir else os.path.join
    train, test = (read_rows(join(args.data_dir, f"adult.{s}")) for s in ("data", "test"))
    return train, test


def load_datasets(paths: list[str], args: argparse.Namespace) -> tuple[list[dict], list[dict]]:
    """`el_submit --data TRAIN --data TEST` (examples/census_spark wrote them): with
    MultiWorkerMirroredStrategy each worker reads its own share of the training rows (and
    every worker runs the same number of steps: the whole set's); otherwise this process
    feeds every step and reads them all. Every test row, for the evaluation."""
    from tfyarn.data import read

    if len(paths) != 2:
        raise SystemExit("give two datasets: --data TRAIN --data TEST")
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    args.sharded = "ps" not in cluster and len(cluster.get("worker", [])) > 1
    args.steps = read.manifest(paths[0]).rows // args.batch_size
    return (list(read.rows(paths[0], whole=not args.sharded)),
            list(read.rows(paths[1], whole=True)))


def encoder_state(paths: list[str]) -> dict | None:
    """The encoder Spark computed over the whole training set (its manifest's extra)."""
    from tfyarn.data import read

    return read.manifest(paths[0]).extra.get("encoder")


def age_bucket(age: str) -> str:
    return str(sum(int(age) >= b for b in AGE_BOUNDARIES))


class Encoder:
    """Vocabularies and numeric scaling learnt on the training rows; ids share one table
    (each feature at its own offset) so the wide part is a single embedding."""

    log_cols = [NUMERIC.index("capital_gain"), NUMERIC.index("capital_loss")]

    def __init__(self, rows: list[dict[str, str]] | None = None, state: dict | None = None):
        """Learnt from `rows`, or from a `state` computed elsewhere (by Spark over the
        whole training set: examples/census_spark), so every worker encodes alike."""
        if state is None:
            for r in rows:
                r["age_bucket"] = age_bucket(r["age"])
            num = np.array([[float(r[c]) for c in NUMERIC] for r in rows], dtype=np.float32)
            num[:, self.log_cols] = np.log1p(num[:, self.log_cols])
            state = {"vocab": {c: sorted({r[c] for r in rows}) for c in CATEGORICAL},
                     "mean": num.mean(axis=0).tolist(), "std": num.std(axis=0).tolist()}
        self.offsets: dict[str, int] = {}
        self.vocab: dict[str, dict[str, int]] = {}
        size = 0
        for col in CATEGORICAL:
            values = state["vocab"][col]
            self.vocab[col] = {v: i + 1 for i, v in enumerate(values)}  # 0 = unseen
            self.offsets[col] = size
            size += len(values) + 1
        self.deep_size = size
        for cross in CROSSES:
            self.offsets["x".join(cross)] = size
            size += HASH_BUCKETS
        self.size = size
        self.mean = np.array(state["mean"], dtype=np.float32)
        self.std = np.array(state["std"], dtype=np.float32) + 1e-6
        self.state = state  # exported beside the model: scoring encodes rows alike

    def ids(self, r: dict[str, str]) -> list[int]:
        out = [self.offsets[c] + self.vocab[c].get(r[c], 0) for c in CATEGORICAL]
        for cross in CROSSES:
            key = "x".join(r[c] for c in cross).encode()
            out.append(self.offsets["x".join(cross)] + zlib.crc32(key) % HASH_BUCKETS)
        return out

    def transform(self, rows: list[dict[str, str]]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        for r in rows:
            r["age_bucket"] = age_bucket(r["age"])
        num = np.array([[float(r[c]) for c in NUMERIC] for r in rows], dtype=np.float32)
        num[:, self.log_cols] = np.log1p(num[:, self.log_cols])
        features = {"ids": np.array([self.ids(r) for r in rows], dtype=np.int32),
                    "num": (num - self.mean) / self.std}
        labels = np.array([r["income_bracket"].rstrip(".") == ">50K" for r in rows], np.float32)
        return features, labels


# ---------------------------------------------------------------- model and training


def build_model(enc: Encoder):
    """Wide (linear over ids and crosses) + deep (embeddings + numeric -> MLP), one logit."""
    import keras

    ids = keras.Input((len(CATEGORICAL) + len(CROSSES),), dtype="int32", name="ids")
    num = keras.Input((len(NUMERIC),), name="num")
    wide = keras.ops.sum(keras.layers.Embedding(enc.size, 1, name="wide")(ids), axis=1)
    deep_ids = keras.layers.Lambda(lambda t: t[:, : len(CATEGORICAL)])(ids)
    emb = keras.layers.Flatten()(keras.layers.Embedding(enc.deep_size, 8, name="deep")(deep_ids))
    x = keras.layers.Concatenate()([emb, num])
    for units in (64, 32):
        x = keras.layers.Dense(units, activation="relu")(x)
    logit = keras.layers.Add()([wide, keras.layers.Dense(1)(x)])
    return keras.Model({"ids": ids, "num": num}, logit)


def preemption_check():
    """tfyarn.preempting where tfyarn is installed: true once YARN said it will take this
    job's containers (a checkpoint now loses nothing), else never."""
    try:
        from tfyarn import preempting
    except ImportError:
        return lambda: False
    return preempting


def progress_reporter():
    """tfyarn.progress where tfyarn is installed (a task of a tfyarn job: --stall-timeout
    and the page's steps/s read it), else a no-op: this file also runs plainly."""
    try:
        from tfyarn import progress
    except ImportError:
        return lambda step, total=None, **metrics: None
    return progress


def loss_of(loss) -> dict:
    """`loss=` for tfyarn.progress (the job page plots it; `Job.metrics()` has it)."""
    value = _value(loss)
    return {} if value is None else {"loss": value}


def make_step(strategy, model, optimizer, global_batch: int):
    import tensorflow as tf

    @tf.function
    def step(iterator):
        def replica(features, labels):
            with tf.GradientTape() as tape:
                logits = tf.squeeze(model(features, training=True), axis=1)
                losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
                loss = tf.nn.compute_average_loss(losses, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        features, labels = next(iterator)
        return strategy.run(replica, args=(features, labels))

    return step


def dataset(features: dict, labels: np.ndarray, batch: int, repeat: bool):
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(len(labels), seed=7)
    ds = ds.repeat() if repeat else ds
    return ds.batch(batch, drop_remainder=repeat).prefetch(2)


def evaluate(model, features: dict, labels: np.ndarray, batch: int = 4096) -> float:
    """Plain batched forward passes: `model.predict` refuses to run under PSS (`model` may
    be an exported model's `serve`, which takes no `training`)."""
    call = model if not hasattr(model, "trainable_variables") else \
        (lambda x: model(x, training=False))
    logits = np.concatenate([
        np.asarray(call({k: v[i:i + batch] for k, v in features.items()}))
        for i in range(0, len(labels), batch)
    ]).reshape(-1)
    return float(np.mean((logits > 0) == (labels > 0.5)))


def _value(loss) -> float | None:
    """A step's loss as a float: per-replica values summed, a PSS RemoteValue fetched."""
    if loss is None:
        return None
    loss = loss.fetch() if hasattr(loss, "fetch") else loss
    parts = getattr(loss, "values", None)
    return float(sum(np.asarray(p) for p in parts)) if parts else float(np.asarray(loss))


class Epochs:
    """Per-epoch checkpoints (model and optimizer) in `directory`, numbered by global step
    (`per_epoch` steps an epoch): `start` is the epoch to resume from, `skip` the steps of
    it already done (a checkpoint saved at YARN's preemption notice, mid-epoch). Every
    MWMS worker must save (saving is collective), but only the one that `writes` keeps
    its files; the others save into a scratch dir they remove."""

    def __init__(self, directory: str | None, model, optimizer, per_epoch: int,
                 writes: bool = True, summaries: str | None = None) -> None:
        import tensorflow as tf

        self.start, self.skip, self.manager, self.per_epoch = 0, 0, None, per_epoch
        self.preempting, self.saved_at_notice = preemption_check(), False
        self.writer = tf.summary.create_file_writer(summaries) if summaries and writes else None
        if not directory:
            return
        ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)
        self.scratch = None if writes else f"{directory.rstrip('/')}/.scratch-{os.getpid()}"
        try:
            tf.io.gfile.makedirs(directory)
            latest = tf.train.latest_checkpoint(directory)
        except (tf.errors.OpError, OSError) as exc:  # e.g. no HDFS access from this node
            print(f"warning: no checkpoints: cannot use {directory} ({exc})", file=sys.stderr,
                  flush=True)
            return
        self.manager = tf.train.CheckpointManager(ckpt, self.scratch or directory, max_to_keep=2)
        if latest:
            ckpt.restore(latest)
            self.start, self.skip = divmod(int(latest.rsplit("-", 1)[1]), per_epoch)
            print(f"resumed from epoch {self.start}"
                  + (f" step {self.skip} (saved at YARN's preemption notice)" if self.skip
                     else ""), flush=True)

    def first(self, epoch: int) -> int:
        """The epoch's first step to run (past what a mid-epoch checkpoint holds)."""
        return self.skip if epoch == self.start else 0

    def notice(self, step: int) -> None:
        """At YARN's preemption notice (tfyarn.preempting()): save at `step` once, then
        hold until the containers are taken, or the notice lapses (training goes on). The
        chief alone calls this: MWMS workers would each see the notice at another step
        (TensorFlow's PreemptionCheckpointHandler agrees one for them)."""
        if not self.preempting():
            self.saved_at_notice = False
            return
        if self.manager is not None and not self.saved_at_notice:
            self.manager.save(checkpoint_number=step)
            print(f"saved a checkpoint at step {step} after YARN's preemption notice",
                  flush=True)
        self.saved_at_notice = True
        while self.preempting():
            time.sleep(0.2)

    def done(self, epoch: int, loss=None) -> None:
        """Epoch `epoch` (counted from 1) is complete: its loss to TensorBoard, and save it."""
        self.scalar("epoch_loss", loss, epoch)
        if self.manager is None:
            return
        self.manager.save(checkpoint_number=epoch * self.per_epoch)
        if self.scratch:
            import tensorflow as tf

            tf.io.gfile.rmtree(self.scratch)

    def scalar(self, name: str, value, step: int) -> None:
        if self.writer is None or value is None:
            return
        import tensorflow as tf

        with self.writer.as_default():
            tf.summary.scalar(name, _value(value), step=step)
        self.writer.flush()


def steps_per_epoch(args, labels) -> int:
    """Global steps per epoch: the whole training set once (with --data, from its
    manifest, the same on every worker whatever its share)."""
    return getattr(args, "steps", None) or len(labels) // args.batch_size


def train_here(args, enc, train, labels):
    """Single process (plain run, standalone, or chief with no workers)."""
    import keras
    import tensorflow as tf

    model = build_model(enc)
    optimizer = keras.optimizers.Adam(args.learning_rate)
    optimizer.build(model.trainable_variables)
    n = steps_per_epoch(args, labels)
    epochs = Epochs(args.checkpoint_dir, model, optimizer, n, summaries=args.tensorboard_dir)
    step = make_step(tf.distribute.get_strategy(), model, optimizer, args.batch_size)
    it = iter(dataset(train, labels, args.batch_size, repeat=True))
    report = progress_reporter()
    for epoch in range(epochs.start, args.epochs):
        for i in range(epochs.first(epoch), n):
            loss = step(it)
            report(epoch * n + i + 1, args.epochs * n, **loss_of(loss))
            epochs.notice(epoch * n + i + 1)
        epochs.done(epoch + 1, loss)
    return model, epochs


def train_ps(args, enc, train, labels, resolver):
    """Chief of a tensorflow-ps job with workers: ClusterCoordinator + schedule."""
    import keras
    import tensorflow as tf

    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = build_model(enc)
        optimizer = keras.optimizers.Adam(args.learning_rate)
        optimizer.build(model.trainable_variables)
        n = steps_per_epoch(args, labels)
        epochs = Epochs(args.checkpoint_dir, model, optimizer, n,
                        summaries=args.tensorboard_dir)
    step = make_step(strategy, model, optimizer, args.batch_size)

    def per_worker():
        return dataset(train, labels, args.batch_size, repeat=True)

    it = iter(coordinator.create_per_worker_dataset(per_worker))
    report = progress_reporter()
    preempting = preemption_check()
    for epoch in range(epochs.start, args.epochs):
        for i in range(epochs.first(epoch), n):
            loss = coordinator.schedule(step, args=(it,))
            report(epoch * n + i + 1, args.epochs * n)  # scheduled: the chief's view
            if preempting():  # what was scheduled is done first: then the save holds it
                coordinator.join()
                epochs.notice(epoch * n + i + 1)
        coordinator.join()
        report((epoch + 1) * n, args.epochs * n, **loss_of(loss))  # the epoch's last loss
        epochs.done(epoch + 1, loss)
    return model, epochs


def train_mwms(args, enc, train, labels):
    """tensorflow-worker with 2+ workers: MultiWorkerMirroredStrategy + strategy.run
    (Keras 3 `model.fit` fails under MWMS with 2+ workers). Every worker runs every step."""
    import keras
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = build_model(enc)
        optimizer = keras.optimizers.Adam(args.learning_rate)
        optimizer.build(model.trainable_variables)
        n = steps_per_epoch(args, labels)
        epochs = Epochs(args.checkpoint_dir, model, optimizer, n,
                        writes=strategy.cluster_resolver.task_id == 0,
                        summaries=args.tensorboard_dir)
    per_replica = args.batch_size // strategy.num_replicas_in_sync
    ds = dataset(train, labels, per_replica * strategy.num_replicas_in_sync, repeat=True)
    if getattr(args, "sharded", False):  # each worker read its own share already
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = \
            tf.data.experimental.AutoShardPolicy.OFF
        ds = ds.with_options(options)
    it = iter(strategy.experimental_distribute_dataset(ds))
    step = make_step(strategy, model, optimizer, args.batch_size)
    report = progress_reporter()
    for epoch in range(epochs.start, args.epochs):
        for i in range(epochs.first(epoch), n):
            loss = step(it)
            report(epoch * n + i + 1, args.epochs * n, **loss_of(loss))
        epochs.done(epoch + 1, loss)
    return model, epochs


def serve(resolver) -> None:
    """ps / worker of a tensorflow-ps job: serve until tfyarn stops this task."""
    import tensorflow as tf

    task = resolver.task_type, resolver.task_id
    print(f"serving as {task[0]}:{task[1]}", flush=True)
    tf.distribute.Server(resolver.cluster_spec(), job_name=task[0], task_index=task[1],
                         protocol="grpc", start=True).join()


def export(model, enc: Encoder, directory: str) -> None:
    """The trained model as a SavedModel (a plain copy: no strategy's variables) and the
    encoder's state beside it; only the chief (or MWMS worker 0) calls this."""
    import tensorflow as tf

    plain = build_model(enc)
    plain.set_weights(model.get_weights())
    plain.export(directory, format="tf_saved_model", verbose=False)
    with tf.io.gfile.GFile(f"{directory.rstrip('/')}/encoder.json", "w") as f:
        f.write(json.dumps(enc.state))
    print(f"model exported to {directory}", flush=True)


def score(args: argparse.Namespace) -> float:
    """adult.test scored by an exported model (`serve`, the SavedModel's endpoint)."""
    import tensorflow as tf

    directory = args.score.rstrip("/")
    with tf.io.gfile.GFile(f"{directory}/encoder.json", "r") as f:
        enc = Encoder(state=json.loads(f.read()))
    loaded = tf.saved_model.load(directory)
    _, test_rows = load(args)
    test, labels = enc.transform(test_rows)
    return evaluate(loaded.serve, test, labels)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.score:
        print(f"eval_accuracy={score(args):.4f}", flush=True)
        return 0
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    cluster = tf_config.get("cluster", {})
    role = tf_config.get("task", {}).get("type", "chief")
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver() if cluster else None
    if "ps" in cluster and role in ("ps", "worker"):
        serve(resolver)
        return 0
    train_rows, test_rows = load(args)
    paths = os.environ.get("TFYARN_DATA", "").split(",")
    state = encoder_state(paths) if paths[0] and not args.synthetic else None
    enc = Encoder(train_rows, state)
    (train, labels), (test, test_labels) = enc.transform(train_rows), enc.transform(test_rows)
    exports = True
    if "ps" in cluster and cluster.get("worker"):
        model, epochs = train_ps(args, enc, train, labels, resolver)
    elif "ps" not in cluster and len(cluster.get("worker", [])) > 1:
        model, epochs = train_mwms(args, enc, train, labels)
        exports = resolver.task_id == 0
    else:
        model, epochs = train_here(args, enc, train, labels)
    accuracy = evaluate(model, test, test_labels)
    epochs.scalar("eval_accuracy", accuracy, args.epochs)
    print(f"trained on {len(labels)} rows, evaluated on {len(test_labels)}", flush=True)
    print(f"eval_accuracy={accuracy:.4f}", flush=True)
    if args.model_dir and exports:
        export(model, enc, args.model_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
