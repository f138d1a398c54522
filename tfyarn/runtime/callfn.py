"""A task that calls a Python function (`tfyarn.run`): `python -m tfyarn.runtime.callfn
PAYLOAD`, where PAYLOAD is the cloudpickled (function, args, kwargs) shipped with -f.

Owns the task's side of `tfyarn.run`: unpickle, call with TF_CONFIG and the ranks set as
for any command, and leave the return value, or the exception with its formatted
traceback, cloudpickled in the file the launcher names (`RESULT_VAR`), which the
launcher publishes with the task's exit record. Must not talk to the store itself.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

RESULT_VAR = "TFYARN_RESULT_FILE"  # set by the launcher for every task
RESULT_MAX = 1 << 20  # bytes of a pickled return value carried back (the store's values)


def _pickled(ok: bool, value: Any) -> bytes:
    import cloudpickle

    try:
        data = cloudpickle.dumps((ok, value))
    except Exception as exc:  # noqa: BLE001 - an unpicklable value is told, not lost
        what = "return value" if ok else "exception"
        data = cloudpickle.dumps((False, (TypeError(f"the task's {what} cannot be pickled: "
                                                    f"{exc!r}"), "")))
    if len(data) > RESULT_MAX:
        data = cloudpickle.dumps((False, (ValueError(
            f"the task's return value is {len(data)} bytes pickled, over tfyarn.run's "
            f"{RESULT_MAX}: write large results to files (HDFS) and return their paths"), "")))
    return data


def main(argv: list[str]) -> int:
    import cloudpickle

    with open(argv[0], "rb") as f:
        fn, args, kwargs = cloudpickle.load(f)
    try:
        ok, value = True, fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - handed back to the caller with its traceback
        ok, value = False, (exc, traceback.format_exc())
        sys.stderr.write(value[1])
    out = os.environ.get(RESULT_VAR)
    if out:
        with open(out, "wb") as f:
            f.write(_pickled(ok, value))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
