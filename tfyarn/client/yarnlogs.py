"""A YARN job's logs: the containers' live log links, the aggregated logs (`yarn logs`,
as skein's own reader fails on Hadoop 3.3's layout), one task's part of them, and the
rest of followed output after the end. Must not write the process environment.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tfyarn.client import appspec, kerberos
from tfyarn.client.cluster import ClientOptions, never_uploading, web_login
from tfyarn.client.livelogs import LiveLogs, http_get
from tfyarn.client.skeinclient import NO_HADOOP, Yarn
from tfyarn.core.errors import (
    EnvironmentMissing,
    StoreGone,
    TfYarnError,
)
from tfyarn.core.jobspec import container_name
from tfyarn.core.say import say
from tfyarn.core.tfconfig import Task
from tfyarn.core.timing import (
    AGGREGATION_WAIT_S,
    LIVE_LOG_POLL_S,
)


def log_url(container: Any) -> str:
    url = container.yarn_container_logs
    return url if not url or "://" in url else f"http://{url}"


def select_task_logs(text: str, task: str) -> str:
    """From `yarn logs` output, the sections of the container that ran `task`."""
    blocks, current = [], []
    for line in text.splitlines(keepends=True):
        if line.startswith("Container: ") and current:
            blocks.append("".join(current))
            current = []
        current.append(line)
    if current:
        blocks.append("".join(current))
    marker = f"tfyarn: {task}: "
    return "".join(b for b in blocks if marker in b)


def live_get(opts: ClientOptions) -> Any:
    """How live logs are fetched from the NodeManagers: HTTP, signed under Kerberos."""
    return functools.partial(http_get, login=web_login(opts))


@contextmanager
def logs_env(opts: ClientOptions) -> Iterator[dict[str, str]]:
    """The environment `yarn logs` runs in: -conf's configuration; with --keytab, a ticket
    cache of its own (one kinit for every `yarn logs` run inside)."""
    if shutil.which("yarn") is None:
        raise EnvironmentMissing(f"`yarn` is not on PATH: {NO_HADOOP}")
    env = dict(os.environ)
    if opts.conf_dir:
        env["HADOOP_CONF_DIR"] = os.path.abspath(opts.conf_dir)
    with kerberos.keytab_env(opts.principal, opts.keytab, env) as env:
        yield env


def yarn_logs(app_id: str, env: dict[str, str],
              timeout: float | None = None) -> subprocess.CompletedProcess:
    """`yarn logs -applicationId APP` in `env` (`logs_env`; skein's own reader fails on
    Hadoop 3.3's bucket-logs-tfile layout): the aggregated logs, as bytes."""
    return subprocess.run(["yarn", "logs", "-applicationId", app_id], capture_output=True,
                          env=env, timeout=timeout)


def finish_live_logs(live: LiveLogs, app_id: str, opts: ClientOptions) -> None:
    """After the end: the rest of each followed container's output, from the aggregated
    logs (the NodeManager forgets an ended application's containers within seconds; YARN
    aggregates their logs within seconds too). Bounded: says what to run when it gives up;
    at once when only lost nodes' uploads are left (`never_uploading`: they never come)."""
    deadline, lost = time.monotonic() + AGGREGATION_WAIT_S, []
    with logs_env(opts) as env:
        while live.pending():
            lost = never_uploading(app_id, opts)  # then the read below is the last one
            live.finish(yarn_logs(app_id, env, timeout=AGGREGATION_WAIT_S).stdout)
            if lost or not live.pending() or time.monotonic() > deadline:
                break
            time.sleep(LIVE_LOG_POLL_S)
    if live.pending() and lost:
        say(f"the rest of the output on {', '.join(lost)} is lost with the node (a lost "
            f"node never uploads its logs); what YARN has: tfyarn logs {app_id}")
    elif live.pending():
        say(f"some output is not aggregated yet; all of it later: tfyarn logs {app_id}")


def live_log_urls(client: Yarn, app_id: str, task: str | None) -> list[tuple[str, str]]:
    """A running application's containers and their live log pages: `task`'s own
    container, else (-ppn/-wnpg packing, or no task) every container: one has it."""
    app = client.connect(app_id)
    if app is None:
        raise TfYarnError(f"{app_id} is not running yet; try again: tfyarn logs {app_id}")
    try:
        containers = app.containers()
    except StoreGone as exc:  # the AM ended between the report and this call
        raise TfYarnError(f"{app_id} ended just now ({exc}); try again: tfyarn logs "
                          f"{app_id}") from None
    if task:
        own = [c for c in containers
               if container_name(c.service_name) == appspec.service_name(Task.parse(task))]
        containers = own or containers
    return [(c.service_name, log_url(c)) for c in containers]


def aggregated_text(app_id: str, task: str | None, opts: ClientOptions) -> str:
    """An ended application's aggregated logs (one task's container, or all of them)."""
    with logs_env(opts) as env:
        r = yarn_logs(app_id, env)
    if r.returncode != 0:
        raise TfYarnError(f"yarn logs failed for {app_id}: "
                          f"{r.stderr.decode(errors='replace').strip()[-500:]} "
                          "(is log aggregation enabled, yarn.log-aggregation-enable?)")
    out = r.stdout.decode(errors="replace")
    text = select_task_logs(out, task) if task else out
    if task and not text:
        raise TfYarnError(f"no container of {app_id} ran {task}; see all: tfyarn logs {app_id}")
    return text

