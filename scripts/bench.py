#!/usr/bin/env python3
"""Benchmarks the user-facing latencies tfyarn promises; prints one JSON object.

- help_s: whole-process time of `el_submit --help` (target <= 0.15 s);
- local_to_tf_config_s: `el_submit --local` with 4 no-op tasks, from launch until every
  task's process has TF_CONFIG (each task stamps the time it started);
- bare_spawn_s: the same 4 commands spawned directly, launch until all stamped;
- overhead_s: the difference (target <= 0.5 s).
Medians over --repeat runs. Run: python scripts/bench.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

STAMP = 'date +%s.%N > "$STAMPS/${TFYARN_TASK_TYPE:-bare}${TFYARN_TASK_INDEX:-$I}"'
TASKS = 4


def help_time() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tfyarn.cli", "--help"], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def last_stamp(stamps: str, start: float) -> float:
    values = []
    for name in os.listdir(stamps):
        with open(os.path.join(stamps, name)) as f:
            values.append(float(f.read()))
    assert len(values) == TASKS, f"expected {TASKS} stamps, got {len(values)}"
    return max(values) - start


def local_time(stamps: str) -> float:
    env = {**os.environ, "STAMPS": stamps}
    start = time.time()
    subprocess.run([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn",
                    str(TASKS), "--local", "-c", STAMP], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return last_stamp(stamps, start)


def bare_time(stamps: str) -> float:
    start = time.time()
    procs = [subprocess.Popen(["/bin/sh", "-c", STAMP], env={**os.environ, "STAMPS": stamps,
                                                              "I": str(i)})
             for i in range(TASKS)]
    for p in procs:
        p.wait()
    return last_stamp(stamps, start)


def median_of(fn, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as stamps:
            runs.append(fn(stamps))
    return statistics.median(runs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    n = p.parse_args().repeat
    help_s = statistics.median(help_time() for _ in range(n))
    local_s = median_of(local_time, n)
    bare_s = median_of(bare_time, n)
    print(json.dumps({"help_s": round(help_s, 3), "local_to_tf_config_s": round(local_s, 3),
                      "bare_spawn_s": round(bare_s, 3), "overhead_s": round(local_s - bare_s, 3),
                      "targets": {"help_s": 0.15, "overhead_s": 0.5}, "repeat": n}, indent=2))


if __name__ == "__main__":
    main()
