"""Census, Spark to training in one program: `pl_submit` runs `pre_train` in Spark and
`train` in every task, and training starts while Spark still writes.

    pl_submit census_program.py -t tensorflow-worker -wn 2 -wm 2048 \\
        -f ../census/census_single.py,prepare.py                       # YARN
    pl_submit census_program.py -t tensorflow-worker -wn 2 --local \\
        -f ../census/census_single.py,prepare.py                       # local[*]

pre_train (on the gateway, in Spark): the Adult CSV parsed and typed by Spark (prepare.py),
the encoder learnt over the whole training set (kept as `extra`), the training rows
(CENSUS_COPIES times: a bigger job's worth of data) and the test rows returned; tfyarn
writes them as datasets while the tasks read them.
train (each task; MultiWorkerMirroredStrategy with 2+ workers): reads its own share of
`train` as tf.data while it is written, CENSUS_EPOCHS times (`--env CENSUS_EPOCHS=2`),
checkpoints every 50 steps (model, optimizer, the reader's position and the rows counted,
per worker) and resumes from the newest step every worker saved: a restarted job neither
repeats nor skips a row. Shares may differ by a shard: a worker that has run out steps
with an empty batch until every worker has. Then every test row is scored, and worker 0
exports the model to TFYARN_MODEL_DIR.
Settings by environment: CENSUS_DATA (pre_train: the dir with adult.data.gz and
adult.test.gz, a local dir or hdfs://; default ../census), CENSUS_COPIES (pre_train,
default 1), CENSUS_SHARDS (pre_train, default 8), CENSUS_EPOCHS (tasks, default 2),
CENSUS_BATCH (tasks, rows per worker and step, default 256).
"""

from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
for where in (HERE, os.path.join(HERE, "..", "census")):  # the gateway; tasks get them by -f
    if os.path.isdir(where) and where not in sys.path:
        sys.path.insert(0, where)

from tfyarn.data.program import Context, Program  # noqa: E402

BATCH = int(os.environ.get("CENSUS_BATCH", "256"))  # rows per worker and step
EVERY = 50  # steps between checkpoints


class Census(Program):
    def pre_train(self, spark):
        import prepare
        from pyspark.sql import functions as F

        data = os.environ.get("CENSUS_DATA", os.path.join(HERE, "..", "census"))
        source = (lambda n: f"{data.rstrip('/')}/{n}.gz") if "://" in data else \
            (lambda n: "file://" + os.path.abspath(os.path.join(data, f"{n}.gz")))
        train = prepare.frame(spark, source("adult.data")).cache()
        self.extra = {"encoder": prepare.encoder_state(train)}
        copies = int(os.environ.get("CENSUS_COPIES", "1"))
        shards = int(os.environ.get("CENSUS_SHARDS", "8"))
        test = prepare.frame(spark, source("adult.test")).coalesce(2)
        if copies == 1:
            return {"train": train.repartition(shards, F.rand(seed=7)), "test": test}
        # each partition makes its copies of the (broadcast) rows: no shuffle, so a
        # partition is written as soon as it is computed, while the others still are
        copy = spark.range(0, copies, 1, numPartitions=min(copies, shards))
        return {"train": copy.crossJoin(F.broadcast(train)).drop("id"), "test": test}

    def train(self, ctx: Context) -> None:
        Trainer(ctx).run()


class Trainer:
    """One task's training: its strategy, model, checkpoint and the rows it counted."""

    def __init__(self, ctx: Context) -> None:
        import census_single as cs
        import keras
        import tensorflow as tf

        print(f"tensorflow imported at {_now()}", flush=True)
        self.ctx, self.tf, self.cs = ctx, tf, cs
        cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
        self.workers = len(cluster.get("worker", [])) or 1
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy() if self.workers > 1 \
            else tf.distribute.get_strategy()
        self.enc = cs.Encoder(state=ctx.extra["encoder"])
        with self.strategy.scope():
            self.model = cs.build_model(self.enc)
            self.optimizer = keras.optimizers.Adam(1e-3)
            self.optimizer.build(self.model.trainable_variables)
        epochs = int(os.environ.get("CENSUS_EPOCHS", "2"))
        self.it = iter(ctx.dataset("train", BATCH).repeat(epochs))
        self.rows = tf.Variable(0, dtype=tf.int64)  # this worker's, kept in its checkpoint
        self.fnlwgt = tf.Variable(0, dtype=tf.int64)
        self.steps = tf.Variable(0, dtype=tf.int64)
        self.ckpt = tf.train.Checkpoint(model=self.model, optimizer=self.optimizer,
                                        iterator=self.it, rows=self.rows,
                                        fnlwgt=self.fnlwgt, steps=self.steps)
        self.manager = None
        if ctx.checkpoint_dir:
            mine = f"{ctx.checkpoint_dir.rstrip('/')}/{ctx.task_type}-{ctx.task_index}"
            self.manager = tf.train.CheckpointManager(self.ckpt, mine, max_to_keep=3)
            self._resume()
        self._step = self._make_step()
        self._left = tf.function(lambda flag: self.strategy.reduce(
            "SUM", self.strategy.run(tf.identity, args=(flag,)), axis=None))

    def _resume(self) -> None:
        """The newest step every worker has saved (one may have died between its save and
        another's): this worker's checkpoint of that step."""
        tf = self.tf
        root = self.ctx.checkpoint_dir.rstrip("/")
        newest = []
        for i in range(self.workers):
            latest = tf.train.latest_checkpoint(f"{root}/worker-{i}")
            newest.append(int(latest.rsplit("-", 1)[1]) if latest else 0)
        common = min(newest)
        if common:
            self.ckpt.restore(f"{self.manager.directory}/ckpt-{common}").expect_partial()
            print(f"resumed from step {common}: {int(self.rows.numpy())} rows read before",
                  flush=True)

    def _make_step(self):
        tf = self.tf
        global_batch = BATCH * self.workers

        @tf.function
        def step(features, labels, weights):
            def replica(features, labels, weights):
                with tf.GradientTape() as tape:
                    logits = tf.squeeze(self.model(features, training=True), axis=1)
                    losses = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels,
                                                                     logits=logits)
                    loss = tf.reduce_sum(losses * weights) / global_batch
                grads = tape.gradient(loss, self.model.trainable_variables)
                self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables,
                                                   strict=True))
                return loss

            return self.strategy.run(replica, args=(features, labels, weights))

        return step

    def _rows(self, batch: dict) -> list[dict]:
        cols = {k: v.numpy() for k, v in batch.items()}
        n = len(cols["age"])
        return [{k: (v[i].decode() if isinstance(v[i], bytes) else v[i]) for k, v in
                 cols.items()} for i in range(n)]

    def run(self) -> None:
        tf, np = self.tf, __import__("numpy")
        last = None
        while True:
            batch = next(self.it, None)
            if not float(self._left(tf.constant(0.0 if batch is None else 1.0)).numpy()):
                break  # every worker has read its share, every epoch
            if batch is not None:
                rows = self._rows(batch)
                features, labels = self.enc.transform(rows)
                weights = np.ones(len(labels), np.float32)
                self.rows.assign_add(len(rows))
                self.fnlwgt.assign_add(int(sum(int(r["fnlwgt"]) for r in rows)))
                last = (features, labels)
            else:  # this worker's share is done; the others' is not: an empty step
                features, labels = last
                weights = np.zeros(len(labels), np.float32)
            self._step(features, labels, weights)
            self.steps.assign_add(1)
            if int(self.steps.numpy()) == 1:
                print(f"first step at {_now()}", flush=True)
            if self.manager is not None and int(self.steps.numpy()) % EVERY == 0:
                self.manager.save(checkpoint_number=int(self.steps.numpy()))
        self._finish()

    def _finish(self) -> None:
        print(f"trained on {int(self.rows.numpy())} rows (fnlwgt sum "
              f"{int(self.fnlwgt.numpy())}) in {int(self.steps.numpy())} steps", flush=True)
        test, labels = self.enc.transform(list(self.ctx.rows("test", whole=True)))
        print(f"eval_accuracy={self.cs.evaluate(self.model, test, labels):.4f}", flush=True)
        first = self.ctx.task_index == 0 and self.ctx.task_type in ("worker", "chief")
        if self.ctx.model_dir and first:
            self.cs.export(self.model, self.enc, self.ctx.model_dir)


def _now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"
