"""Spark's JVMs in the tests start as the sandbox's and skein's do: C1 only, serial GC.

Why: each test's Spark (a local-mode driver, or on YARN its driver, AM and executors) lives
for one test, and C2's compiler threads cost more CPU than they earn in a JVM that short;
CI is bound by its 2 cores. Measured on two pipeline tests: 82 CPU-s with Spark's defaults,
54 with these. Spark reads them from `SPARK_CONF_DIR`'s spark-defaults.conf, which tfyarn
never sets, so what the tests check of tfyarn is unchanged. A run that sets SPARK_CONF_DIR
itself keeps its own. This must not touch tfyarn's own JVM options (the driver's, the AM's).
"""

from __future__ import annotations

import os
from pathlib import Path

OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
KEYS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions",
        "spark.yarn.am.extraJavaOptions")


def spark_conf_dir(build: Path) -> None:
    """Point this test process (and what it starts) at a spark-defaults.conf with OPTIONS,
    kept in `build` (the checkout's 0700 build dir), unless SPARK_CONF_DIR is set."""
    if os.environ.get("SPARK_CONF_DIR"):
        return
    build.mkdir(mode=0o700, exist_ok=True)
    conf = build / "spark-conf"
    conf.mkdir(mode=0o700, exist_ok=True)
    text = "".join(f"{key} {OPTIONS}\n" for key in KEYS)
    path = conf / "spark-defaults.conf"
    if not path.exists() or path.read_text() != text:
        tmp = conf / f".spark-defaults.conf.{os.getpid()}"  # xdist workers write it too
        tmp.write_text(text)
        tmp.replace(path)
    os.environ["SPARK_CONF_DIR"] = str(conf)
