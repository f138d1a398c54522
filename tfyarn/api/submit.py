"""`tfyarn.submit`: el_submit's options as Python keywords, through the one parser.

Owns the Python side of the flag table: every option's keyword is its `ElSubmitArgs`
field (`kind` is `-t`, `workers` `-wn`, ...), values in Python's types (ints,
bools, lists, a dict for `env`) turned into the strings the parser checks, so a bad value
raises the same `SpecError` (a ValueError) with the same words as the flag. Also the
pre-submit checks both the API and the CLI make (`--data`). Must not print, exit, install
signal handlers or write the process environment.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tfyarn.api.options import ElSubmitArgs, from_el_submit
from tfyarn.core.errors import SpecError
from tfyarn.core.jobspec import JobSpec
from tfyarn.core.settings import Settings

if TYPE_CHECKING:
    from tfyarn.client.cluster import ClientOptions

FIELDS = {f.name: f for f in dataclasses.fields(ElSubmitArgs)}


def args_of(command: str | Sequence[str] | None, options: Mapping[str, Any]) -> ElSubmitArgs:
    """The typed options as the parser takes them; an unknown keyword is named, with the
    closest known one."""
    values: dict[str, Any] = {}
    for name, value in options.items():
        if name not in FIELDS:
            near = difflib.get_close_matches(name, sorted(FIELDS), n=1)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise SpecError(f"unknown option {name!r}{hint}; the options are el_submit's, "
                            "named as in the README's table")
        if value is not None:
            values[name] = _as_flag(name, value)
    if command is not None:
        values["command"] = (command,) if isinstance(command, str) else tuple(command)
    return ElSubmitArgs(**values)


def _as_flag(name: str, value: Any) -> Any:
    """A Python value as the flag's text: numbers and booleans as typed (`-x True`),
    a list of files comma-joined, env as KEY=VALUE pairs, repeatable ones as tuples."""
    default = FIELDS[name].default
    flag = FIELDS[name].metadata.get("flag", name)
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise SpecError(f"{flag}: expected True or False, got {value!r}")
        return value
    if isinstance(default, tuple):
        if isinstance(value, Mapping):
            return tuple(f"{k}={v}" for k, v in value.items())
        return (str(value),) if isinstance(value, str | os.PathLike) else tuple(map(str, value))
    if name == "files" and not isinstance(value, str | os.PathLike):
        return ",".join(os.fspath(v) for v in value)
    return str(value) if isinstance(value, bool | int | float | str | os.PathLike) else \
        _refuse(flag, value)


def _refuse(flag: str, value: Any) -> Any:
    raise SpecError(f"{flag}: expected a number or a text, got {type(value).__name__} "
                    f"{value!r}")


def job_spec(spec: JobSpec | str | os.PathLike | None = None, *,
             command: str | Sequence[str] | None = None, cwd: str | None = None,
             **options: Any) -> tuple[ElSubmitArgs, JobSpec]:
    """The options and the job they give: from keywords, or a job file (what `--dry-run`
    prints) with keywords laid over it, or a JobSpec as it is (keywords refused then)."""
    cwd = cwd or os.getcwd()
    args = args_of(command, options)
    if isinstance(spec, JobSpec):
        if options or command is not None:
            raise SpecError("give a JobSpec or options, not both (a job file takes both)")
        return args, spec
    if spec is None:
        return args, from_el_submit(args, cwd)
    from tfyarn.api import jobfile  # YAML: loaded only where a job file is in play

    given = {k: getattr(args, k) for k in FIELDS
             if getattr(args, k) not in (None, (), False)}
    return args, jobfile.with_flags(os.fspath(spec), given, cwd)


def check_data(spec: JobSpec, settings: Settings, conf: str | None, principal: str | None,
               keytab: str | None) -> tuple[tuple[str, str], ...]:
    """--data: each path a committed dataset with a shard for every reading task, before
    anything is submitted (under Kerberos as the submit's login); the tasks' env naming
    them (and the first one's columns)."""
    if not spec.data:
        return ()
    from tfyarn.client import kerberos
    from tfyarn.data import read

    login = kerberos.login(settings.conf_dir(conf), principal, keytab, settings.krb5_ccache)
    manifests = []
    for path in spec.data:
        try:
            m = read.manifest(path, login)
        except SpecError as exc:
            raise SpecError(f"--data {exc}") from None
        if len(m.shards) < spec.readers and m.sealed:  # a streamed one: its writer's care
            raise SpecError(f"--data {path}: {len(m.shards)} shards for {spec.readers} reading "
                            f"tasks (chief and workers, or ranks); rewrite it with "
                            f"shards={spec.readers} or more, or run fewer tasks")
        manifests.append(m)
    return ((read.DATA_VAR, ",".join(spec.data)), (read.SCHEMA_VAR, manifests[0].schema_json()))


def ready(args: ElSubmitArgs, spec: JobSpec, settings: Settings) -> JobSpec:
    """The job as it is submitted: `-f` checked (sizes, links) and --data's env added."""
    from tfyarn.client import files as filesmod

    login_pair(args.principal, args.keytab)
    filesmod.inventory(spec.files, spec.yarn.max_upload_mb)
    data_env = check_data(spec, settings, args.conf, args.principal, args.keytab)
    return dataclasses.replace(spec, env=(*spec.env, *data_env))


def login_pair(principal: str | None, keytab: str | None) -> None:
    if bool(principal) != bool(keytab):
        raise SpecError("--principal and --keytab go together; give both or neither")


def client_options(conf_dir: str | None, principal: str | None, keytab: str | None,
                   settings: Settings) -> ClientOptions:
    """How a lifecycle call reaches the cluster; -conf and the login pair checked first
    (SpecError naming the flag)."""
    from tfyarn.client.cluster import ClientOptions

    if conf_dir is not None and not os.path.isdir(conf_dir):
        raise SpecError(f"-conf: {conf_dir!r} is not a directory of Hadoop configuration")
    login_pair(principal, keytab)
    if principal and keytab:
        from tfyarn.client import kerberos

        kerberos.check_keytab(principal, keytab)
    return ClientOptions(conf_dir, principal, keytab, settings=settings)
