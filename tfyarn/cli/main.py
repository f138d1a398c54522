"""Command line: `el_submit` (a faithful clone of EMR's) and the `tfyarn` group.

Imports nothing heavy at module level: skein, grpc, hdfs and tensorflow load only inside
the commands that need them, so `el_submit --help` stays instant.
Must not hold logic of its own beyond turning flags into calls and errors into one line
and an exit code. Long because it declares every command with its help text.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import dataclasses
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NoReturn

import click

from tfyarn import __version__
from tfyarn.api.options import OPTIONS
from tfyarn.cli import helpcache
from tfyarn.client.interrupts import Interrupted, Interrupts
from tfyarn.core.errors import EXIT_BAD_INPUT, SpecError, TfYarnError
from tfyarn.core.redact import redact
from tfyarn.core.say import say
from tfyarn.core.tfconfig import Task

FLAGS = ("--local", "--dry-run", "--detach", "--force", "-h", "--help", "--version")
assert "--force" in {o.flag for o in OPTIONS if o.is_flag}
VALUE_FLAGS = frozenset(o.flag for o in OPTIONS if not o.is_flag) | {"--job"}
KNOWN = VALUE_FLAGS | set(FLAGS) | {"-c"}
METAVARS = {o.flag: o.metavar for o in OPTIONS} | {"--job": "FILE"}
TFYARN_ONLY = sorted(f for f in KNOWN if f.startswith("--") and f not in ("--help",))
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def split_command(argv: Sequence[str]) -> tuple[list[str], tuple[str, ...] | None]:
    """Split at el_submit's `-c`: everything after it is the user command, verbatim."""
    i = 0
    while i < len(argv):
        if argv[i] == "-c":
            return list(argv[:i]), tuple(argv[i + 1:])
        i += 2 if argv[i] in VALUE_FLAGS else 1
    return list(argv), None


def check_options(args: Sequence[str], known: frozenset[str] | set[str] = KNOWN) -> None:
    """Name an unknown option as typed (click would say `-w` for `-wnn`) with the
    closest known one."""
    i = 0
    while i < len(args):
        word = args[i].split("=", 1)[0] if args[i].startswith("--") else args[i]
        if word.startswith("-") and len(word) > 1 and word not in known:
            import difflib  # only for a typo

            near = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.5)
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise click.UsageError(f"no such option: {word}{hint}")
        if word in VALUE_FLAGS and "=" not in args[i]:
            value = args[i + 1] if i + 1 < len(args) else None
            if value is not None and value.split("=", 1)[0] in known:  # click would take it
                want = METAVARS.get(word, "VALUE").replace("BOOL", "True (or False)")
                raise click.UsageError(f"{word} needs a value before {value}: "
                                       f"write {word} {want}")
            i += 2
        else:
            i += 1


def warn_options_in_command(command: Sequence[str] | None) -> None:
    """tfyarn's own options written after -c go to the user's command: say so."""
    misplaced = [w for w in command or () if w.split("=", 1)[0] in TFYARN_ONLY]
    if misplaced:
        click.echo(f"tfyarn: warning: {', '.join(misplaced)} after -c is passed to your command, "
                   "not to el_submit; put el_submit's options before -c", err=True)


def _options(multiple: bool = False, is_flag: bool = False) -> Callable[[Callable], Callable]:
    """click's options for the table's value options (or its repeatable ones, or its
    flags), in the table's order."""
    def add(fn: Callable) -> Callable:
        for o in reversed(OPTIONS):
            if (o.multiple, o.is_flag) != (multiple, is_flag):
                continue
            kind = {"multiple": True} if o.multiple else {"is_flag": True} if o.is_flag else {}
            fn = click.option(o.flag, o.field, metavar=o.metavar or None, help=o.help,
                              **kind)(fn)
        return fn
    return add


@click.command("submit", context_settings=CONTEXT, options_metavar="[OPTIONS] -c COMMAND...",
               epilog=(
    "Exit codes: 0 succeeded, 1 failed, 2 bad input, 3 killed, 130 interrupted. "
    "stdout carries only the job/application id; progress and task output go to stderr."))
@_options()
@click.option("-c", "command_marker", metavar="COMMAND...",
              help="the command to run; takes the rest of the line verbatim, quoted or not")
@_options(multiple=True)
@click.option("--local", "local", is_flag=True, help="run every task as a local process")
@click.option("--dry-run", "dry_run", is_flag=True, help="print the resolved job as YAML, start "
              "nothing")
@click.option("--detach", "detach", is_flag=True, help="YARN: return right after submission")
@_options(is_flag=True)
@click.option("--job", "job_option", metavar="FILE", help="a job file (what --dry-run prints); "
              "flags given beside it override it")
@click.argument("job_file", required=False, metavar="[JOB.yaml]")
@click.version_option(__version__, "--version", prog_name="tfyarn")
@click.pass_context
def submit(ctx: click.Context, local: bool, dry_run: bool, detach: bool,
           command_marker: str | None, job_option: str | None,
           job_file: str | None, **raw: Any) -> int:
    """Submit a TensorFlow job to YARN (or run it locally with --local), el_submit style;
    or a job file that --dry-run wrote: `tfyarn submit job.yaml`."""
    from tfyarn.api.submit import ready
    from tfyarn.core.settings import Settings

    settings = Settings.from_environ()
    interrupts: Interrupts = ctx.obj["interrupts"]
    with edge():
        args, spec = _job(ctx.obj.get("command") or (), raw, job_option, job_file)
        checked = ready(args, spec, settings)
        if dry_run:
            from tfyarn.api import jobfile  # YAML: loaded only where a job file is in play

            click.echo(jobfile.dump(spec), nl=False)
            return 0
        interact = _interact(args, local, detach)
        _warn_semantics(checked, args, local)
        if local:
            return _run_local(checked, settings, interrupts)
        from tfyarn.client.cluster import ClientOptions
        from tfyarn.client.yarnsubmit import submit_and_watch

        return submit_and_watch(checked, ClientOptions(
            conf_dir=args.conf, principal=args.principal, keytab=args.keytab, detach=detach,
            interact=interact, settings=settings), interrupts)


def _job(command: Sequence[str], raw: dict[str, Any], job_option: str | None,
         job_file: str | None) -> tuple[Any, Any]:
    """The typed el_submit flags and the job they give; with a job file, the file's job
    with the typed flags laid over it (the API's one parser)."""
    from tfyarn.api.submit import job_spec

    if job_option and job_file and job_option != job_file:
        raise SpecError(f"two job files ({job_file} and --job {job_option}); give one")
    return job_spec(job_option or job_file, command=tuple(command) if command else None,
                    **raw)


def _interact(args: Any, local: bool, detach: bool) -> bool:
    from tfyarn.api.options import parse_bool

    interact = parse_bool("-interact", args.interact)
    if interact and detach:
        raise SpecError("-interact True follows the job, --detach returns at once: drop one "
                        "(follow a detached job with: tfyarn logs APP --follow)")
    if interact and local:
        click.echo("tfyarn: note: -interact has no effect with --local (local mode always "
                   "shows every task's output)", err=True)
    return interact


def _warn_semantics(spec: Any, args: Any, local: bool) -> None:
    if spec.app_type == "tensorflow-ps" and not spec.stop_ps_when_done:
        click.echo("tfyarn: note: -x False: ps tasks are never stopped by tfyarn, so this job "
                   "ends only when your code stops them (or --timeout); add -x True to stop them "
                   "once the chief exits 0", err=True)
    if local and args.conf:
        click.echo("tfyarn: note: -conf has no effect with --local", err=True)


def _run_local(spec: Any, settings: Any, interrupts: Interrupts) -> int:
    from tfyarn.client.liveline import LiveLine
    from tfyarn.client.local import LocalJob

    LocalJob(spec, settings, interrupts, line=LiveLine.on(sys.stderr, settings)).run()
    return 0


class edge:
    """Turn TfYarnError into click.ClickException (with its exit code) at the CLI edge."""

    def __enter__(self) -> edge:
        return self

    def __exit__(self, _t: object, exc: BaseException | None, _tb: object) -> None:
        if isinstance(exc, TfYarnError):
            err = click.ClickException(redact(str(exc)))
            err.exit_code = exc.exit_code
            raise err from exc


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, "--version", prog_name="tfyarn")
def tfyarn() -> None:
    """tfyarn: TensorFlow on YARN. `tfyarn submit` takes el_submit's options."""


tfyarn.add_command(submit)


def _table_option(field: str, *also: str) -> Callable[[Callable], Callable]:
    """A submit option of the flag table on another command, as the table declares it (its
    flag, metavar and help: one declaration), with `also` as further names."""
    o = next(o for o in OPTIONS if o.field == field)
    return click.option(o.flag, *also, field, metavar=o.metavar or None, help=o.help)


conf_option = _table_option("conf", "--conf")


def cluster_options(fn: Any) -> Any:
    """-conf, and the Kerberos login of a lifecycle command (a keytab: cron, no ticket)."""
    fn = _table_option("keytab")(fn)
    fn = _table_option("principal")(fn)
    return conf_option(fn)


def _cluster(conf: str | None, principal: str | None, keytab: str | None) -> Any:
    """How a lifecycle command reaches the cluster, with this process's settings."""
    from tfyarn.api.submit import client_options
    from tfyarn.core.settings import Settings

    return client_options(conf, principal, keytab, Settings.from_environ())


@contextlib.contextmanager
def _attached(job_id: str, conf: str | None, principal: str | None,
              keytab: str | None) -> Iterator[Any]:
    """The API's handle on the job the command names (checks -conf and the login), let go
    of at the end (its skein driver, its driver's log); the job itself runs on."""
    from tfyarn import api

    job = api.attach(job_id, conf_dir=conf, principal=principal, keytab=keytab)
    try:
        yield job
    finally:
        job.close()


def _task(task: str | None) -> str | None:
    if task is not None:
        try:
            Task.parse(task)
        except ValueError as exc:
            raise SpecError(f"--task: {exc}") from None
    return task


@tfyarn.command("status")
@click.argument("app_id")
@cluster_options
@click.option("--tasks", "tasks", is_flag=True, help="the per-task table: while running "
              "(connects to the application, slower), and once finished (its kept page)")
def status_cmd(app_id: str, conf: str | None, principal: str | None, keytab: str | None,
               tasks: bool) -> int:
    """State, final status and diagnostics of an application (or of a local job id)."""
    with edge(), _attached(app_id, conf, principal, keytab) as job:
        st = job.status()
        local = app_id.startswith("local_")
        click.echo(f"{'job' if local else 'application'}: {app_id}")
        if st.name:
            click.echo(f"name: {st.name}")
        click.echo(f"state: {st.state}\nfinal status: {st.final_status}")
        if st.tracking_url:
            click.echo(f"{'job page' if local else 'tracking URL'}: {st.tracking_url}")
        if local:
            click.echo(f"logs: tfyarn logs {app_id}")
        diag = st.diagnostics.strip()
        if diag:
            click.echo(f"diagnostics:{chr(10) if chr(10) in diag else ' '}{diag}")
        if not (tasks or local):
            if not st.done:
                click.echo(f"(per-task table: tfyarn status {app_id} --tasks)")
            return 0
        kept = st.done and not local
        click.echo("tasks (its kept page; all of it: tfyarn history):" if kept else "tasks:")
        for line in job.task_lines():
            click.echo(f"  {line}")
        return 0


@tfyarn.command("logs")
@click.argument("app_id")
@click.option("--task", "task", metavar="TYPE:INDEX", help="only this task, e.g. worker:1")
@click.option("--follow", "-F", "follow", is_flag=True, help="while running: print every "
              "task's output as it comes, until the job ends")
@cluster_options
def logs_cmd(app_id: str, task: str | None, follow: bool, conf: str | None,
             principal: str | None, keytab: str | None) -> int:
    """Task logs: aggregated logs once finished; while running, container log URLs, or
    the output itself with --follow."""
    with edge():
        task = _task(task)
    with edge(), _attached(app_id, conf, principal, keytab) as job:
        if not follow and app_id.startswith("application_") and not job.status().done:
            click.echo(f"{app_id} is running; container logs:")
            for name, url in job.log_urls(task):
                click.echo(f"  {name:<12} {url}")
            return 0
        for line in job.logs(task, follow=follow):
            click.echo(line)
        if follow:
            say(f"{app_id} ended: {job.status().state}; all of it: tfyarn logs {app_id}")
        return 0


@tfyarn.command("kill")
@click.argument("app_id")
@cluster_options
def kill_cmd(app_id: str, conf: str | None, principal: str | None, keytab: str | None) -> int:
    """Stop a running job, every task with it (orderly first; a local job too)."""
    with edge(), _attached(app_id, conf, principal, keytab) as job:
        st = job.status()
        if st.done:
            say(f"{app_id} already ended: {st.state} / {st.final_status}")
            return 0
        say(f"{app_id}: {job.kill('killed with tfyarn kill')}")
        return 0


@tfyarn.command("ls")
@click.option("--all", "show_all", is_flag=True, help="include finished applications")
@cluster_options
def ls_cmd(show_all: bool, conf: str | None, principal: str | None, keytab: str | None) -> int:
    """tfyarn applications, newest first."""
    with edge():
        from tfyarn import api

        apps = api.jobs(finished=show_all, conf_dir=conf, principal=principal, keytab=keytab)
    click.echo(f"{'APPLICATION':<32} {'NAME':<20} {'STATE':<10} {'FINAL':<10} STARTED")
    for a in apps:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(a.started_ms / 1000)) \
            if a.started_ms else "-"
        click.echo(f"{a.app_id:<32} {a.name[:20]:<20} {a.state:<10} {a.final_status:<10} "
                   f"{started}")
    return 0


@tfyarn.command("history")
@click.option("--host", "host", default="127.0.0.1", show_default=True,
              help="address to serve on (0.0.0.0: every interface)")
@click.option("--port", "port", default=18088, show_default=True, type=click.IntRange(0, 65535),
              help="port to serve on (0: any free one)")
@click.option("--dir", "dirs", multiple=True, metavar="DIR", help="a history dir to list "
              "(hdfs://... or a local dir; repeatable). Default: the cluster's (tfyarn.yaml "
              "`history: dir:`, else hdfs:///user/$USER/.tfyarn/history) and local jobs' "
              "(~/.tfyarn/history, $TFYARN_HISTORY_DIR)")
@click.option("--spnego-keytab", "spnego_keytab", metavar="FILE", help="a keytab holding "
              "HTTP/HOST@REALM: viewers log in by Kerberos (SPNEGO) and each sees only "
              "the jobs whose view ACL admits them (YARN's admins: all). Without it: "
              "only you, by the token in the printed URL")
@cluster_options
def history_cmd(host: str, port: int, dirs: tuple[str, ...], spnego_keytab: str | None,
                conf: str | None, principal: str | None, keytab: str | None) -> int:
    """Serve the tfyarn jobs, finished and running, newest first, each linking its page
    (a finished job's as its driver kept it), until Ctrl-C."""
    with edge():
        from tfyarn.client.history import HistoryServer
        from tfyarn.client.yarnhistory import history_gate, history_of

        opts = _cluster(conf, principal, keytab)
        gate = history_gate(opts, spnego_keytab) if spnego_keytab else None
        reader = history_of(opts, dirs)
        reader.listing()  # every kept page read once before the first answer (~15 ms each)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        from tfyarn.core.settings import Settings
        from tfyarn.system.private import user_secret

        server = HistoryServer(reader, user_secret(Settings.from_environ().home), gate)
        try:
            url = server.start(host, port)
        except OSError as exc:
            raise SpecError(f"--host/--port: cannot serve on {host}:{port} ({exc}); pick "
                            "another port (--port 0: any free one)") from None
        who = " (viewers log in by Kerberos: SPNEGO)" if gate else ""
        click.echo(f"tfyarn: history: {url}{who}", err=True)
        try:
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        finally:
            server.stop()
        return 0


@tfyarn.command("skein-driver")
@click.argument("action", type=click.Choice(["start", "stop", "status"]))
@cluster_options
def skein_driver_cmd(action: str, conf: str | None, principal: str | None,
                     keytab: str | None) -> int:
    """A warm skein driver (skein's YARN client JVM, not tfyarn's driver in the job):
    el_submit, status and kill use it instead of starting a JVM each (about 5 s) while
    it runs, for the same Hadoop configuration."""
    with edge():
        from tfyarn.client.cluster import skein_driver

        opts = _cluster(conf, None, None)
        return skein_driver(action, dataclasses.replace(opts, principal=principal,
                                                             keytab=keytab))


_old_name = copy.copy(skein_driver_cmd)  # `tfyarn driver ...`, its first name: works, unlisted
_old_name.hidden = True
tfyarn.add_command(_old_name, "driver")


@tfyarn.command("check-data")
@click.argument("paths", nargs=-1, required=True)
@click.option("--fields", "fields", type=click.IntRange(1, 100_000), metavar="N",
              help="fields per line (default: the most common count in the file)")
@conf_option
def check_data_cmd(paths: tuple[str, ...], fields: int | None, conf: str | None) -> int:
    """Find what breaks CSV readers: blank lines, lines with the wrong number of fields,
    header lines; local paths or hdfs:// (WebHDFS). Exit 0 when every file is clean."""
    from tfyarn.core.settings import Settings
    from tfyarn.hdfs import datacheck

    with edge():
        settings = Settings.from_environ()
        lines, found = datacheck.check_paths(paths, fields, settings.conf_dir(conf),
                                             settings.user)
    for line in lines:
        click.echo(line)
    if found:
        click.echo(f"tfyarn: {found} problem line(s); fix them (or skip them in your input "
                   "pipeline) before training", err=True)
    return 1 if found else 0


@tfyarn.command("build-hdfs-plugin")
def build_hdfs_plugin_cmd() -> int:
    """Build (or find) the hdfs:// plugin for this env's TensorFlow; print its path.

    Tasks do this by themselves at their first `import tensorflow` (cached per TF version
    in ~/.cache/tfyarn or $TFYARN_CACHE); run it ahead where nodes have no compiler."""
    with edge():
        from tfyarn.hdfs import plugin as hdfs

        return hdfs.main()


# ---------------------------------------------------------------- pl_submit


@click.command("pl_submit", context_settings=CONTEXT, epilog=(
    "Exit codes as el_submit's. stdout carries only the training job's id; progress, "
    "Spark's and the tasks' output go to stderr."))
@click.argument("program", metavar="PROGRAM.py")
@_options()
@_options(multiple=True)
@click.option("--local", "local", is_flag=True, help="Spark in local[*], every task a local "
              "process")
@_options(is_flag=True)
@click.option("--class", "cls", metavar="NAME", help="the Program subclass to run (default: "
              "the one the file defines)")
@click.option("--data-dir", "data_dir", metavar="DIR", help="where pre_train's datasets go "
              "(default: hdfs:///user/$USER/.tfyarn/data, locally a temp dir)")
@click.option("--keep-data", "keep_data", is_flag=True, help="keep the datasets after the job")
@click.option("--no-pipeline", "no_pipeline", is_flag=True, help="submit the training only once "
              "Spark has written everything (default: at its first shard)")
@click.option("--spark-conf", "spark_conf", multiple=True, metavar="KEY=VALUE",
              help="a Spark setting for pre_train's application (repeatable)")
@click.version_option(__version__, "--version", prog_name="tfyarn")
@click.pass_context
def pl_submit(ctx: click.Context, program: str, local: bool, cls: str | None,
              data_dir: str | None, keep_data: bool, no_pipeline: bool,
              spark_conf: tuple[str, ...], **raw: Any) -> int:
    """One program, Spark to training (EMR's pl_submit): PROGRAM.py's Program subclass
    runs pre_train(spark) in a Spark application, its DataFrames are written as datasets
    while the training job (el_submit's options; every task runs train(ctx)) reads them."""
    from tfyarn.api.options import parse_pairs
    from tfyarn.api.pipeline import fit

    with edge():
        conf = dict(parse_pairs("--spark-conf", spark_conf))
        options = {k: v for k, v in raw.items() if v not in (None, (), False)}
        fitted = fit(program, local=local, cls=cls, data_dir=data_dir, keep_data=keep_data,
                     pipeline=not no_pipeline, spark_conf=conf, say=_say, on_submit=_relay_training,
                     **options)
        if fitted.model_dir and not local:  # a local job says where its model is itself
            click.echo(f"tfyarn: model dir (TFYARN_MODEL_DIR): {fitted.model_dir}", err=True)
    return 0


def _say(line: str) -> None:
    click.echo(f"tfyarn: {line}", err=True)


def _relay_training(job: Any) -> None:
    """The training job's id on stdout; a YARN job's tasks' output on stderr as it comes
    (a local job shows its own)."""
    import threading

    click.echo(job.id)
    if not job.id.startswith("application_"):
        return

    def pump() -> None:
        try:
            for line in job.logs(follow=True):
                click.echo(line, err=True)
        except TfYarnError:  # the handle closed at the job's end, which fit reports
            return

    threading.Thread(target=pump, name="tfyarn-logs", daemon=True).start()


# ---------------------------------------------------------------- entry points


def run_click(cmd: click.Command, args: list[str], obj: dict, prog: str) -> int:
    """Run a click command with one-line errors and the one exit-code table."""
    interrupts = obj.setdefault("interrupts", Interrupts()).install()
    try:
        if cmd is submit:
            check_options(args)
        elif args[:1] == ["submit"]:
            check_options(args[1:])
        rv = cmd.main(args=args, obj=obj, prog_name=prog, standalone_mode=False)
    except click.UsageError as e:
        click.echo(f"Error: {e.format_message()} (see {prog} --help)", err=True)
        return EXIT_BAD_INPUT
    except click.ClickException as e:
        click.echo(f"Error: {e.format_message()}", err=True)
        return e.exit_code
    except Interrupted as e:
        click.echo(f"Error: {e}; nothing was left running", err=True)
        return e.exit_code
    except click.Abort:
        click.echo(f"Error: {interrupts.words()}; nothing was left running", err=True)
        return interrupts.exit_code()
    return rv if isinstance(rv, int) else 0


def end(code: int) -> NoReturn:
    """Exit with `code` without tearing the interpreter down: the streams are flushed
    and atexit's handlers run here, and every thread of ours is a daemon; the module
    teardown left out cost ~20 ms of every command (a tenth of a small local job)."""
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):  # closed, or a reader gone
                stream.flush()
    atexit._run_exitfuncs()
    os._exit(code)


def help_text(cmd: click.Command, prog: str) -> str:
    """What `prog --help` prints: click's own rendering, as its help option does."""
    return cmd.get_help(click.Context(cmd, info_name=prog, **CONTEXT)) + "\n"


def el_submit_main(argv: Sequence[str] | None = None) -> None:
    args, command = split_command(sys.argv[1:] if argv is None else argv)
    if command is None and args in helpcache.HELP_ARGS:  # kept for the next (cli.entry)
        text = help_text(submit, "el_submit")
        helpcache.keep_help("el_submit", text)
        click.echo(text, nl=False)
        end(0)
    warn_options_in_command(command)
    end(run_click(submit, args, {"command": command}, "el_submit"))


def pl_submit_main(argv: Sequence[str] | None = None) -> None:
    end(run_click(pl_submit, list(sys.argv[1:] if argv is None else argv), {}, "pl_submit"))


def tfyarn_main(argv: Sequence[str] | None = None) -> None:
    args, command = split_command(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["submit"]:
        warn_options_in_command(command)
    end(run_click(tfyarn, args, {"command": command}, "tfyarn"))


if __name__ == "__main__":
    el_submit_main()
