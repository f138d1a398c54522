"""A one-program job (`pl_submit`, `tfyarn.spark.fit`): the user's class and what each
training task runs of it.

The user writes one Python file with a class deriving from `Program` (the names EMR's
TensorFlow-on-Spark uses): `pre_train(spark)` returns the DataFrame(s) to train on, and
runs on the gateway in a Spark application; `train(ctx)` is the training code, run in
every task of the job with a `Context` naming the datasets tfyarn wrote; `shutdown()`
runs after `train` in every task, whether it returned or raised.
Each task runs `python -m tfyarn.data.program FILE CLASS`: it imports the file (shipped
with the job's files) by path, without running its `__main__` part.
Must not import Spark or TensorFlow: a task gets them only if the user's code does.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from tfyarn.core.errors import SpecError
from tfyarn.core.tfconfig import parse_tf_config
from tfyarn.data import read
from tfyarn.data.manifest import Manifest


class Program:
    """Subclass it. `pre_train` returns a DataFrame (written as dataset `train`) or a
    dict of them by name (written in that order; the first is the training data).
    `extra`, set in `pre_train` (JSON-able: vocabularies, statistics), is kept in every
    dataset's manifest and read in the tasks as `ctx.extra`."""

    extra: dict | None = None

    def pre_train(self, spark: Any) -> Any:
        raise NotImplementedError("pre_train(spark) returns the DataFrame to train on")

    def train(self, ctx: Context) -> Any:
        raise NotImplementedError("train(ctx) is the training code, run in every task")

    def shutdown(self) -> None:
        """After `train`, in every task, whether it returned or raised."""


@dataclass(frozen=True)
class Context:
    """What a task of a one-program job knows: its role and the datasets (by name)."""

    task_type: str
    task_index: int
    data: dict[str, str] = field(default_factory=dict)  # name -> dataset path, in order
    model_dir: str | None = None
    checkpoint_dir: str | None = None
    attempt: int = 0

    @classmethod
    def from_environ(cls, env: Mapping[str, str] | None = None) -> Context:
        e = os.environ if env is None else env
        _, task = parse_tf_config(e.get("TF_CONFIG"))
        paths = read.data_paths(e)
        return cls(task.type if task else "worker",
                   task.index if task else int(e.get("RANK", 0)),
                   {p.rstrip("/").rsplit("/", 1)[-1]: p for p in paths},
                   e.get("TFYARN_MODEL_DIR") or None, e.get("TFYARN_CHECKPOINT_DIR") or None,
                   int(e.get("TFYARN_ATTEMPT", 0)))

    def path(self, name: str | None = None) -> str:
        if not self.data:
            raise SpecError("this task was given no dataset (TFYARN_DATA is empty)")
        if name is None:
            return next(iter(self.data.values()))
        if name not in self.data:
            raise SpecError(f"no dataset {name!r}: pre_train wrote {', '.join(self.data)}")
        return self.data[name]

    def dataset(self, name: str | None = None, batch_size: int | None = None, *,
                input_context: Any = None) -> Any:
        """This task's share of dataset `name` (default: the first) as tf.data; it
        follows the write while Spark is still writing."""
        return read.dataset(self.path(name), batch_size, input_context=input_context)

    def rows(self, name: str | None = None, whole: bool = False) -> Iterator[dict]:
        """This task's share (`whole`: every row) as plain dicts, following the write."""
        return read.rows(self.path(name), whole=whole)

    def manifest(self, name: str | None = None) -> Manifest:
        return read.manifest(self.path(name))

    @property
    def extra(self) -> dict:
        """What pre_train kept in `Program.extra`."""
        return self.manifest().extra


def load(path: str, name: str | None = None) -> type[Program]:
    """The Program subclass `name` (default: the one the file defines) of the file."""
    if not os.path.isfile(path):
        raise SpecError(f"{path}: no such program file; give the path of your program's .py")
    name_in = f"tfyarn_program_{abs(hash(os.path.abspath(path))):x}"
    spec = importlib.util.spec_from_file_location(name_in, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name_in] = module  # pickling and dataclasses find it by name
    spec.loader.exec_module(module)
    found = {k: v for k, v in vars(module).items() if isinstance(v, type)
             and issubclass(v, Program) and v is not Program and v.__module__ == module.__name__}
    if name is not None:
        if name not in found:
            raise SpecError(f"--class {name}: {path} defines no Program subclass of that name "
                            f"(it defines: {', '.join(found) or 'none'})")
        return found[name]
    if len(found) != 1:
        raise SpecError(f"{path} defines {len(found)} Program subclasses "
                        f"({', '.join(found) or 'none'}): name one with --class")
    return next(iter(found.values()))


def main(argv: list[str] | None = None) -> int:
    """A task: the class of FILE, `train(ctx)`, then `shutdown()`."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print("usage: python -m tfyarn.data.program FILE [CLASS]", file=sys.stderr)
        return 2
    program = load(args[0], args[1] if len(args) == 2 else None)()
    try:
        program.train(Context.from_environ())
    finally:
        program.shutdown()
    return 0


if __name__ == "__main__":
    from tfyarn.data import program  # the module the user's file takes Program from

    sys.exit(program.main())
