"""Submitting a job to YARN: refuse what no node can hold, stage, build skein's
application spec, submit, and (unless --detach) hand the application to the watcher.
Must not write the process environment.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace

from tfyarn.client import appspec, common, rm, staging
from tfyarn.client.cluster import ClientOptions, require_client, rest_client, web_login, yarn_client
from tfyarn.client.interrupts import Interrupts
from tfyarn.client.liveline import LiveLine
from tfyarn.client.skeinclient import Yarn
from tfyarn.client.watch import Watcher
from tfyarn.core import capacity
from tfyarn.core.errors import (
    SpecError,
)
from tfyarn.core.jobspec import JobSpec, YarnOptions
from tfyarn.core.progress import Progress
from tfyarn.core.say import say


def submit_and_watch(spec: JobSpec, opts: ClientOptions,
                     interrupts: Interrupts | None = None) -> int:
    interrupts = interrupts or Interrupts()
    with submitted(spec, opts, interrupts, watched=not opts.detach) as (client, app_id):
        common.emit_id(app_id, "application id")
        if opts.detach and not interrupts.count:  # a signal while submitting: kill it
            say(f"submitted {app_id}; follow it with: tfyarn status {app_id} | tfyarn "
                f"logs {app_id} | tfyarn kill {app_id}")
            return 0
        return Watcher(client, app_id, spec, interrupts, interact=opts.interact, opts=opts,
                       line=LiveLine.on(sys.stderr, opts.settings)).run()


def with_site_acls(yarn: YarnOptions, defaults: appspec.ClusterDefaults) -> YarnOptions:
    """The job's ACLs with the site's (tfyarn.yaml `acls:`) added."""
    return replace(yarn, view_acls=tuple(dict.fromkeys((*defaults.view_acls, *yarn.view_acls))),
                   modify_acls=tuple(dict.fromkeys((*defaults.modify_acls,
                                                    *yarn.modify_acls))))


@contextmanager
def submitted(spec: JobSpec, opts: ClientOptions, interrupts: Interrupts,
              watched: bool = False) -> Iterator[tuple[Yarn, str]]:
    """Stage and submit the job; the YARN client (open until the block ends) and the
    application id. Signals are only recorded from before the submit on: one during it
    must not lose the id (the watcher's first step kills the application then).
    `watched`: this client follows the job, so its driver waits for it to read the
    final status even when the job ends before the client's first look."""
    require_client(opts)
    settings, conf_dir = opts.settings, opts.hadoop_conf
    defaults = staging.load_defaults(settings, conf_dir)
    spec = staging.keytab_job(spec, opts.principal, opts.keytab)
    refuse_unfit(spec, opts)
    spec = with_memory_ceiling(spec, opts)
    spec = replace(spec, history_dir=spec.history_dir or defaults.history_dir,
                   redact=defaults.redact, yarn=with_site_acls(spec.yarn, defaults))
    with ExitStack() as held:
        with tempfile.TemporaryDirectory(prefix="tfyarn-stage-") as tmp:  # uploaded by then
            staged = staging.use_cache(staging.stage(spec, tmp), settings, conf_dir,
                                       web_login(opts))
            staged = staging.with_keytab(staged, opts.keytab)
            app_spec = appspec.application_spec(spec, staged, defaults, watched)
            client = held.enter_context(yarn_client(opts))
            held.enter_context(interrupts.deferred())
            upload = Progress("submitting; skein uploads what YARN localizes",
                              staging.local_bytes(staged))
            app_id = client.submit(app_spec, max(r.resources.gpus for r in spec.roles))
            upload.finish(done=upload.total)
        yield client, app_id


def refuse_unfit(spec: JobSpec, opts: ClientOptions) -> None:
    """A container no node of the job's queue and label can ever hold is a SpecError
    before anything is staged or submitted (YARN would accept the application and fail
    or wait later): the flag and the largest value that could run. Where the
    ResourceManager's REST API does not answer, the job goes unchecked, and the submit
    says so."""
    queue = spec.yarn.queue or "default"
    try:
        client = rest_client(opts)
        nodes = capacity.nodes_of(client.get("nodes"))
        maximum = capacity.queue_maximum(client.get("scheduler"), queue)
    except rm.Unavailable as exc:
        say(f"could not read what the cluster can give ({exc}); submitting unchecked")
        return
    why = capacity.unfit(capacity.asks_of(spec), nodes, maximum, queue, spec.yarn.node_label)
    if why is not None:
        raise SpecError(why)


def with_memory_ceiling(spec: JobSpec, opts: ClientOptions) -> JobSpec:
    """--memory-growth: the job learns the queue's largest container, which no grown
    container may pass (skein's ApplicationMaster dies on a request over it). Where the
    ResourceManager does not say, memory is not grown, and the submit says so."""
    if spec.memory_growth is None:
        return spec
    try:
        ceiling = rest_client(opts).max_allocation_mb(spec.yarn.queue)
    except rm.Unavailable as exc:
        ceiling, why = None, str(exc)
    else:
        why = "its scheduler does not report one"
    if ceiling is None:
        say(f"--memory-growth: the ResourceManager did not say the queue's largest container "
            f"({why}); memory will not be grown")
        return spec
    spec = replace(spec, yarn=replace(spec.yarn, max_memory_mb=ceiling))
    ladders = [f"{r.name} " + " \u2192 ".join(str(mb) for mb in spec.memory_sizes(r.name))
               for r in spec.roles]
    say(f"--memory-growth: memory kills restart with {'; '.join(ladders)} MB (the queue's "
        f"largest container is {ceiling} MB)")
    return spec

