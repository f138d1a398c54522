"""Program files (sources) of one-program jobs, for the local tests (test_pipeline.py)
and the YARN ones (integration/test_pipeline.py): each reads TEST_GATE, a file the test
names, where it needs one."""

HEAD = """
import os, time
from tfyarn.data.program import Program
GATE = os.environ.get("TEST_GATE", "/nonexistent")
"""

COUNT = HEAD + """
class Count(Program):
    def pre_train(self, spark):
        self.extra = {"hello": 1}
        return spark.range(0, 1000, numPartitions=4).selectExpr("id", "id * 2 as twice")

    def train(self, ctx):
        ids = [r["id"] for r in ctx.rows()]
        print(f"{ctx.task_type}:{ctx.task_index} read {len(ids)} sum {sum(ids)} "
              f"extra {ctx.extra['hello']}", flush=True)
"""

NOT_A_FRAME = HEAD + """
class Count(Program):
    def pre_train(self, spark):
        return spark.range(10).count()
"""

NO_INPUT = HEAD + """
class Missing(Program):
    def pre_train(self, spark):
        return spark.read.csv("/nonexistent/tfyarn-test-input.csv").count()
"""

# partition 1 fails once training has started: Spark's failure must stop the training
SPARK_FAILS = HEAD + """
def part(i):
    if i == 1:
        while not os.path.exists(GATE):
            time.sleep(0.05)
        raise ValueError("injected: partition 1 is malformed")
    return [(i * 10 + j,) for j in range(10)]

class Fails(Program):
    def pre_train(self, spark):
        rdd = spark.sparkContext.parallelize(range(2), 2).flatMap(part)
        return spark.createDataFrame(rdd, "id long")

    def train(self, ctx):
        open(GATE, "w").close()
        print("read", sum(1 for _ in ctx.rows()), flush=True)  # waits for partition 1
"""

# Spark never finishes (partition 1 waits forever): a failed training must stop it
TRAIN_FAILS = HEAD + """
def part(i):
    while i == 1:
        time.sleep(0.05)
    return [(i * 10 + j,) for j in range(10)]

class Crash(Program):
    def pre_train(self, spark):
        rdd = spark.sparkContext.parallelize(range(2), 2).flatMap(part)
        return spark.createDataFrame(rdd, "id long")

    def train(self, ctx):
        raise RuntimeError("injected: training crashed")
"""

# A training loop reporting tfyarn.progress, checkpointing every 10 steps (a file per
# task in TFYARN_CHECKPOINT_DIR) and resuming from it. In attempt 0, worker:1 deadlocks
# after step 50: alive, heartbeating, no progress (--stall-timeout's case). Prints where
# it started and ended.
STALLS = """
import os, sys, time
import tfyarn

index, attempt = os.environ["TFYARN_TASK_INDEX"], os.environ["TFYARN_ATTEMPT"]
ckpt_dir = os.environ["TFYARN_CHECKPOINT_DIR"]
os.makedirs(ckpt_dir, exist_ok=True)
ckpt = os.path.join(ckpt_dir, f"step-{index}")
start = int(open(ckpt).read()) if os.path.exists(ckpt) else 0
for step in range(start, 80):
    tfyarn.progress(step, loss=1.0 / (step + 1))
    if step == 50 and attempt == "0" and index == "1":
        print("deadlocked at step 50", flush=True)
        time.sleep(3600)
    if step % 10 == 0:
        with open(ckpt + ".tmp", "w") as f:
            f.write(str(step))
        os.replace(ckpt + ".tmp", ckpt)
    time.sleep(0.05)
print(f"worker:{index} attempt {attempt} trained steps {start}..79", flush=True)
"""
