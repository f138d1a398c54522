"""Program files (sources) of jobs shared by the local tests (test_pipeline.py), the YARN
ones (integration/) and scripts/bench.py: the one-program jobs read TEST_GATE, a file the
test names, where they need one."""

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


# A training loop of 0.1 s steps (`tfyarn.progress`); task 0 saves the step to the shared
# state dir every EVERY steps (0: never) and, with `notice`, at YARN's preemption notice
# (then every task holds until the kill; with `exit`, task 0 exits 42 once it saved);
# attempt 0 runs until it is preempted (or LIMIT steps; +N: N steps after a notice
# lapsed), a later one resumes from the saved step and runs 100 more.
# `last<task>.<attempt>`: the last step.
STEPPER = """import os, pathlib, sys, time, tfyarn
ckpt, state = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
every, notice, exits = int(sys.argv[3]), sys.argv[4] in ("notice", "exit"), sys.argv[4] == "exit"
given = sys.argv[5] if len(sys.argv) > 5 else ""
after = int(given[1:]) if given.startswith("+") else None  # steps once a notice lapsed
limit = int(given) if given and after is None else 10**9  # attempt 0's last step
task, attempt = os.environ["TFYARN_TASK_INDEX"], int(os.environ["TFYARN_ATTEMPT"])
saved = state / "step"
start = int(saved.read_text()) if saved.exists() else 0
if attempt == 0:
    (ckpt / f"w{task}.tmp").write_text(os.environ["NM_HOST"])
    os.rename(ckpt / f"w{task}.tmp", ckpt / f"w{task}")
else:
    print(f"attempt {attempt} resumed from step {start}", flush=True)
step = start
while step < (limit if attempt == 0 else start + 100):
    step += 1
    tfyarn.progress(step)
    time.sleep(0.1)
    (state / f"last{task}.{attempt}").write_text(str(step))
    if task == "0" and every and step % every == 0:
        saved.write_text(str(step))
    if notice and tfyarn.preempting():
        (state / f"held{task}.{attempt}").write_text(str(step))  # each task's own count
        if task == "0":
            saved.write_text(str(step))
            print(f"saved a checkpoint at step {step} after YARN's preemption notice", flush=True)
            (state / "held").write_text(str(step))
            if exits:  # as a handler that ends its process once it saved
                sys.exit(42)
        while tfyarn.preempting():
            time.sleep(0.1)
        if after is not None and attempt == 0:
            limit = step + after
"""
