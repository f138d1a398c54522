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
