"""Job files: what `--dry-run` prints, kept in a repo and submitted again.

`tfyarn submit job.yaml` (or `el_submit --job job.yaml`) reads the file back into
el_submit's flags and runs them through the same parser as typed flags, so a file is
checked exactly as flags are, and flags given beside the file override it. A value no
flag can express (an edited `stop_grace_s`, a `containers:` entry) is refused by name,
never silently dropped. Relative paths in the file are relative to the file's directory.
Must not accept a value no flag can give (refused by name), nor write files.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any

import yaml

from tfyarn.api.options import from_el_submit, spec_args
from tfyarn.core.errors import SpecError
from tfyarn.core.jobspec import JobSpec
from tfyarn.core.redact import SHOWN

DERIVED = "containers"  # printed by --dry-run for review; recomputed from the roles


def dump(spec: JobSpec) -> str:
    """The job as YAML: every field, plus the containers it asks for (for review)."""
    return yaml.safe_dump(spec.shown().describe(), sort_keys=False)


def read(path: str, env_given: bool = False) -> JobSpec:
    """The JobSpec a job file describes, checked like flags; one SpecError otherwise
    (also for a redacted --env value, unless `env_given`: --env typed replaces them)."""
    data = _load(path)
    env = data.get("env")
    pairs = env if isinstance(env, list) and all(isinstance(x, list) and len(x) == 2
                                                  for x in env) else []
    hidden = [] if env_given else [k for k, v in pairs if v == SHOWN]
    if hidden:
        raise SpecError(f"--job {path}: --env {hidden[0]}: the file holds the redacted value "
                        "--dry-run printed, not the secret; put the value back, or give "
                        "the --env flags again with the job file")
    try:
        spec = JobSpec.from_dict(_absolute(data, os.path.dirname(os.path.abspath(path))))
        _check_derived(data, spec)
    except SpecError as exc:
        raise SpecError(f"--job {path}: {exc}") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise SpecError(f"--job {path}: not a tfyarn job ({type(exc).__name__}: {exc}); "
                        "write one with: el_submit ... --dry-run > job.yaml") from None
    return spec


def with_flags(path: str, given: Mapping[str, Any], cwd: str) -> JobSpec:
    """The file's job with the flags actually typed (`given`: field -> value) laid over
    it, parsed as flags: the same checks, the same errors."""
    args = dataclasses.replace(spec_args(read(path, "env" in given)), **given)
    try:
        return from_el_submit(args, cwd)
    except SpecError as exc:
        raise SpecError(f"--job {path}: {exc}") from None


def _load(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise SpecError(f"--job: cannot read {path!r}: {exc.strerror}") from None
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SpecError(f"--job {path}: not YAML ({exc})") from None
    if not isinstance(data, dict):
        raise SpecError(f"--job {path}: expected a mapping of job fields; write one with: "
                        "el_submit ... --dry-run > job.yaml")
    unknown = sorted(set(data) - {f.name for f in dataclasses.fields(JobSpec)} - {DERIVED})
    if unknown:
        raise SpecError(f"--job {path}: unknown field(s) {', '.join(unknown)}; the fields are "
                        "those --dry-run prints")
    return data


def _absolute(data: dict, base: str) -> dict:
    """Relative local paths (-f sources, the env archive, dirs) made absolute against
    the file's own directory, so a job file in a repo works from any cwd."""
    def fix(p: str | None) -> str | None:
        return p if not p or "://" in p else os.path.normpath(os.path.join(base, p))

    out = dict(data)
    out["files"] = [{**f, "source": fix(f.get("source"))} if isinstance(f, dict) else f
                    for f in data.get("files") or ()]
    runtime = data.get("runtime")
    if isinstance(runtime, dict) and runtime.get("mode") == "virtual-env":
        out["runtime"] = {**runtime, "arg": fix(runtime.get("arg"))}
    for key in ("checkpoint_dir", "model_dir", "tensorboard_dir"):
        if isinstance(data.get(key), str):
            out[key] = fix(data[key])
    out["data"] = [fix(p) if isinstance(p, str) else p for p in data.get("data") or ()]
    return out


def _check_derived(data: Mapping, spec: JobSpec) -> None:
    """What flags cannot say is refused by name: re-parsing the file's own flags must
    give the file's job, and `containers:` must be what the roles give."""
    again = from_el_submit(spec_args(spec), os.getcwd())
    changed = [f.name for f in dataclasses.fields(JobSpec)
               if getattr(again, f.name) != getattr(spec, f.name)]
    if changed:
        raise SpecError(f"{', '.join(changed)} cannot be set this way (no el_submit flag "
                        "gives it); keep the value --dry-run printed")
    if DERIVED in data and data[DERIVED] != spec.describe()[DERIVED]:
        raise SpecError("`containers:` does not match the roles (it is derived: "
                        "change -wn/-ppn/-wnpg's fields, roles and tasks_per_container, or "
                        "delete it)")
