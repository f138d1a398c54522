"""`tfyarn.run(fn, *args, ...)`: a Python function run on every task of a job, the chief's
(or rank 0's) return value back to the caller.

Owns shipping the function (cloudpickled, with -f, so one defined in a notebook works),
the command every task runs (`tfyarn.runtime.callfn` on the launcher's python), and
turning the job's end into a value or the task's own exception (its remote traceback
attached as a note). The job is a `tfyarn.submit` like any other: same options, same
checks, `local=True` the same `--local` path. Must not install signal handlers or write
the process environment.
"""

from __future__ import annotations

import base64
import contextlib
import os
import pickle
import shutil
import site
import sys
import sysconfig
import tempfile
from collections.abc import Iterator, Mapping
from typing import Any

from tfyarn.core.errors import JobFailed, SpecError
from tfyarn.core.records import Outcome
from tfyarn.core.settings import Settings

PAYLOAD = "tfyarn-call.pkl"
COMMAND = f'"${{TFYARN_PYTHON:-python3}}" -m tfyarn.runtime.callfn {PAYLOAD}'
FIRST = ("chief:0", "worker:0")  # whose value comes back: the chief, else rank 0


def run(fn: Any, *args: Any, local: bool = False, kwargs: Mapping[str, Any] | None = None,
        environment: str = "cluster", **options: Any) -> Any:
    """Call `fn(*args, **kwargs)` on every task of a job (TF_CONFIG, ranks and devices set
    as for a command) and return the chief's value (tensorflow-ps: ps tasks are stopped
    once it returns, `exit_ps` defaults to True), or rank 0's. A task that raised
    raises its exception here, its remote traceback in a note. `environment`: "cluster"
    (the nodes' python, or the `mode` given) or "current" (this virtual env, packed once
    and shipped as `-m virtual-env`). `options` are submit's."""
    import cloudpickle

    from tfyarn.api import submit

    if "command" in options:
        raise SpecError("command: tfyarn.run runs the function; use tfyarn.submit for a "
                        "command")
    if not callable(fn):
        raise SpecError(f"fn: tfyarn.run calls a function on every task; {fn!r} (a "
                        f"{type(fn).__name__}) is not callable: pass the function itself, "
                        "e.g. tfyarn.run(train, ...)")
    options.setdefault("exit_ps", True)
    settings = Settings.from_environ()  # once, for this call
    work = tempfile.mkdtemp(prefix="tfyarn-run-", dir=settings.tmpdir)
    try:
        path = os.path.join(work, PAYLOAD)
        with open(path, "wb") as f, _by_value(fn):
            try:
                cloudpickle.dump((fn, args, dict(kwargs or {})), f)
            except (pickle.PicklingError, TypeError, AttributeError) as exc:
                raise SpecError(f"fn: {getattr(fn, '__name__', fn)!s} or its arguments cannot "
                                f"be sent to the tasks ({exc}); define what it uses inside "
                                "it, or pass plain values (paths, numbers) instead of "
                                "open files, locks or sessions") from None
        options.update(_environment(environment, options, settings))
        files = options.pop("files", None) or []
        files = [files] if isinstance(files, str | os.PathLike) else list(files)
        with submit(local=local, command=COMMAND, files=[*files, path], settings=settings,
                    **options) as job:
            try:
                outcome = job.wait()
            except JobFailed as failed:
                raise _task_error(failed) from failed
        return _value(outcome)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def _by_value(fn: Any) -> Iterator[None]:
    """The function's module pickled by value while it is dumped, unless it is installed
    (site-packages): a helper module next to the notebook is not on the nodes. cloudpickle
    keeps that registry process-wide, so it is undone at once."""
    import cloudpickle

    module = sys.modules.get(getattr(fn, "__module__", "") or "")
    path = getattr(module, "__file__", None) or ""
    installed = any(path.startswith(p) for p in {*site.getsitepackages(),
                                                   site.getusersitepackages(),
                                                   sysconfig.get_paths()["stdlib"]})
    if module is None or module.__name__ == "__main__" or installed or not path:
        yield
        return
    cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        cloudpickle.unregister_pickle_by_value(module)


def _environment(environment: str, options: Mapping[str, Any],
                 settings: Settings) -> dict[str, Any]:
    """The options that ship `environment`."""
    if environment == "cluster":
        return {}
    if environment != "current":
        raise SpecError(f"environment: use 'cluster' or 'current', not {environment!r}")
    if options.get("mode") not in (None, "virtual-env", "virtualenv") or options.get("mode_arg"):
        raise SpecError("environment='current' ships this env as -m virtual-env: drop mode "
                        "and mode_arg")
    from tfyarn.api import packenv

    return {"mode": "virtual-env", "mode_arg": packenv.current(settings)}


def _decoded(text: str) -> tuple[bool, Any]:
    import cloudpickle

    return cloudpickle.loads(base64.b64decode(text))


def _value(outcome: Outcome) -> Any:
    name = next((n for n in FIRST if n in outcome.tasks and outcome.tasks[n].result), None)
    if name is None:
        return None
    ok, value = _decoded(outcome.tasks[name].result)
    if not ok:  # a value that could not come back: said as the task's error
        raise value[0]
    return value


def _task_error(failed: JobFailed) -> BaseException:
    """The failing task's own exception, with its traceback as a note; else JobFailed."""
    outcome = getattr(failed, "outcome", None)
    end = outcome.tasks.get(outcome.task) if outcome is not None and outcome.task else None
    if end is None or not end.result:
        return failed
    ok, value = _decoded(end.result)
    if ok:
        return failed
    exc, trace = value
    if trace:
        exc.add_note(f"{outcome.task} raised it; its traceback:\n{trace.rstrip()}")
    return exc
