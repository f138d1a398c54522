"""Command line: `el_submit` (a faithful clone of EMR's) and the `tfyarn` group.

Imports nothing heavy at module level: skein, grpc, hdfs and tensorflow load only inside
the commands that need them, so `el_submit --help` stays instant.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from tfyarn.errors import SpecError, TfYarnError

# (flag, field of ElSubmitArgs, metavar, help) — el_submit's own single-dash options.
EL_OPTIONS: tuple[tuple[str, str, str, str], ...] = (
    ("-t", "app_type", "TYPE", "tensorflow-ps | tensorflow-worker | tensorflow-mpi | standalone "
     "(default tensorflow-ps)"),
    ("-a", "app_name", "NAME", "application name (default tfyarn)"),
    ("-m", "mode", "MODE", "local | virtual-env (virtualenv) | docker (default local)"),
    ("-m_arg", "mode_arg", "ARG", "virtual-env: packed env .tar.gz (local path or hdfs://); "
     "docker: image"),
    ("-interact", "interact", "BOOL", "interactive session (not supported yet)"),
    ("-x", "exit_ps", "BOOL", "tensorflow-ps: stop ps and workers once the chief exits 0 "
     "(default False)"),
    ("-enable_tensorboard", "enable_tensorboard", "BOOL", "start TensorBoard (not supported yet)"),
    ("-log_tensorboard", "log_tensorboard", "PATH", "TensorBoard log dir (not supported yet)"),
    ("-conf", "conf", "DIR", "Hadoop configuration dir (sets HADOOP_CONF_DIR)"),
    ("-f", "files", "PATHS", "comma list of files/dirs shipped to every task's working dir; "
     "-f ./ ships the current dir's contents"),
    ("-pn", "ps_num", "N", "number of ps (tensorflow-ps; default 1)"),
    ("-pc", "ps_cores", "N", "vcores per ps (default 1)"),
    ("-pm", "ps_memory", "MB", "memory per ps in MB, or 2g / 512m (default 1024)"),
    ("-wn", "worker_num", "N", "number of workers; tensorflow-ps makes worker 0 the chief "
     "(default 1)"),
    ("-wc", "worker_cores", "N", "vcores per worker (default 1)"),
    ("-wg", "worker_gpus", "N", "GPUs per worker (default 0)"),
    ("-wm", "worker_memory", "MB", "memory per worker in MB, or 2g / 512m (default 1024)"),
    ("-wnpg", "workers_per_gpu", "N", "workers sharing one GPU (not supported yet)"),
    ("-ppn", "procs_per_node", "N", "processes per node, tensorflow-mpi (not supported yet)"),
    ("-wait_time", "wait_time", "MIN", "minutes to wait for every task to start (default 10)"),
)
# tfyarn's extensions: double-dash, so they never collide with el_submit's spelling.
EXT_OPTIONS: tuple[tuple[str, str, str, str], ...] = (
    ("--timeout", "timeout", "SECONDS", "fail and stop the whole job after this long"),
    ("--queue", "queue", "QUEUE", "YARN queue"),
    ("--python", "python", "PYTHON", "-m local on YARN: the nodes' interpreter (default python3)"),
    ("--node-label", "node_label", "LABEL", "YARN node label expression for the tasks"),
    ("--am-memory", "am_memory", "MB", "ApplicationMaster memory (default 1024)"),
    ("--am-vcores", "am_vcores", "N", "ApplicationMaster vcores (default 1)"),
    ("--principal", "principal", "USER@REALM", "Kerberos principal (with --keytab)"),
    ("--keytab", "keytab", "FILE", "Kerberos keytab (with --principal)"),
)
FLAGS = ("--local", "--dry-run", "--detach", "--force", "-h", "--help")
VALUE_FLAGS = frozenset(f for f, *_ in EL_OPTIONS + EXT_OPTIONS) | {"--env", "--tag"}
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def split_command(argv: Sequence[str]) -> tuple[list[str], tuple[str, ...] | None]:
    """Split at el_submit's `-c`: everything after it is the user command, verbatim."""
    i = 0
    while i < len(argv):
        if argv[i] == "-c":
            return list(argv[:i]), tuple(argv[i + 1:])
        i += 2 if argv[i] in VALUE_FLAGS else 1
    return list(argv), None


def _options(fn: Callable) -> Callable:
    for flag, dest, metavar, text in reversed(EL_OPTIONS + EXT_OPTIONS):
        fn = click.option(flag, dest, metavar=metavar, help=text)(fn)
    return fn


@click.command("submit", context_settings=CONTEXT, options_metavar="[OPTIONS] -c COMMAND...",
               epilog=(
    "Exit codes: 0 succeeded, 1 failed, 2 bad input, 3 killed, 130 interrupted. "
    "stdout carries only the job/application id; progress and task output go to stderr."))
@_options
@click.option("-c", "command_marker", metavar="COMMAND...",
              help="the command to run; takes the rest of the line verbatim, quoted or not")
@click.option("--env", "env", multiple=True, metavar="KEY=VALUE",
              help="environment variable for every task (repeatable)")
@click.option("--tag", "tags", multiple=True, metavar="TAG", help="YARN application tag")
@click.option("--local", "local", is_flag=True, help="run every task as a local process")
@click.option("--dry-run", "dry_run", is_flag=True, help="print the resolved job as YAML, start "
              "nothing")
@click.option("--detach", "detach", is_flag=True, help="YARN: return right after submission")
@click.option("--force", "force", is_flag=True, help="ship -f files even if over 1 GB")
@click.pass_context
def submit(ctx: click.Context, local: bool, dry_run: bool, detach: bool, principal: str | None,
           keytab: str | None, command_marker: str | None, **raw: Any) -> int:
    """Submit a TensorFlow job to YARN (or run it locally with --local), el_submit style."""
    from tfyarn.jobspec import ElSubmitArgs, from_el_submit
    from tfyarn.settings import Settings

    settings = Settings.from_environ()
    with edge():
        args = ElSubmitArgs(command=ctx.obj.get("command") or (), **raw)
        spec = from_el_submit(args, os.getcwd())
        if bool(principal) != bool(keytab):
            raise SpecError("--principal and --keytab go together; give both or neither")
        if dry_run:
            click.echo(spec.to_yaml(), nl=False)
            return 0
        _warn_semantics(spec, args, local)
        if local:
            return _run_local(spec, settings)
        from tfyarn import yarn

        return yarn.submit_and_watch(spec, settings, yarn.ClientOptions(
            conf_dir=args.conf, principal=principal, keytab=keytab, detach=detach))


def _warn_semantics(spec: Any, args: Any, local: bool) -> None:
    if spec.app_type == "tensorflow-ps" and not spec.stop_ps_when_done:
        click.echo("tfyarn: note: -x False: ps tasks are never stopped by tfyarn, so this job "
                   "ends only when your code stops them (or --timeout); add -x True to stop them "
                   "once the chief exits 0", err=True)
    if local and args.conf:
        click.echo("tfyarn: note: -conf has no effect with --local", err=True)


def _run_local(spec: Any, settings: Any) -> int:
    from tfyarn.local import LocalJob

    outcome = LocalJob(spec, settings).run()
    click.echo(f"tfyarn: job SUCCEEDED: {outcome.message}", err=True)
    return 0


class edge:
    """Turn TfYarnError into click.ClickException (with its exit code) at the CLI edge."""

    def __enter__(self) -> edge:
        return self

    def __exit__(self, _t: object, exc: BaseException | None, _tb: object) -> None:
        if isinstance(exc, TfYarnError):
            err = click.ClickException(str(exc))
            err.exit_code = exc.exit_code
            raise err from exc


@click.group(context_settings=CONTEXT)
def tfyarn() -> None:
    """tfyarn: TensorFlow on YARN. `tfyarn submit` takes el_submit's options."""


tfyarn.add_command(submit)


@tfyarn.command("status")
@click.argument("app_id")
def status_cmd(app_id: str) -> int:
    """State, final status, diagnostics and the per-task table of an application."""
    from tfyarn import yarn

    with edge():
        return yarn.status(app_id)


@tfyarn.command("logs")
@click.argument("app_id")
@click.option("--task", "task", metavar="TYPE:INDEX", help="only this task, e.g. worker:1")
def logs_cmd(app_id: str, task: str | None) -> int:
    """Task logs: aggregated logs once finished, container log URLs while running."""
    from tfyarn import yarn

    with edge():
        return yarn.logs(app_id, task)


@tfyarn.command("kill")
@click.argument("app_id")
def kill_cmd(app_id: str) -> int:
    """Kill a running application (every container with it)."""
    from tfyarn import yarn

    with edge():
        return yarn.kill(app_id)


@tfyarn.command("ls")
@click.option("--all", "show_all", is_flag=True, help="include finished applications")
def ls_cmd(show_all: bool) -> int:
    """tfyarn applications, newest first."""
    from tfyarn import yarn

    with edge():
        return yarn.ls(show_all)


# ---------------------------------------------------------------- entry points


def _interrupt_on_sigterm() -> None:
    def handler(_signum: int, _frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def run_click(cmd: click.Command, args: list[str], obj: dict, prog: str) -> int:
    """Run a click command with one-line errors and el_submit's exit codes."""
    _interrupt_on_sigterm()
    try:
        rv = cmd.main(args=args, obj=obj, prog_name=prog, standalone_mode=False)
    except click.UsageError as e:
        click.echo(f"Error: {e.format_message()} (see {prog} --help)", err=True)
        return 2
    except click.ClickException as e:
        click.echo(f"Error: {e.format_message()}", err=True)
        return e.exit_code
    except (KeyboardInterrupt, click.Abort):
        click.echo("Error: interrupted", err=True)
        return 130
    return rv if isinstance(rv, int) else 0


def el_submit_main(argv: Sequence[str] | None = None) -> None:
    args, command = split_command(sys.argv[1:] if argv is None else argv)
    sys.exit(run_click(submit, args, {"command": command}, "el_submit"))


def tfyarn_main(argv: Sequence[str] | None = None) -> None:
    args, command = split_command(sys.argv[1:] if argv is None else argv)
    sys.exit(run_click(tfyarn, args, {"command": command}, "tfyarn"))


if __name__ == "__main__":
    el_submit_main()
