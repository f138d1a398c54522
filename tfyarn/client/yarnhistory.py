"""Where a cluster keeps finished jobs' pages: the history dirs `tfyarn history` lists
(the cluster's over WebHDFS, local jobs'), its SPNEGO gate, and a finished job's task
table as `tfyarn status --tasks` shows it. Must not write to HDFS: it reads what drivers
kept (they write it, `runtime.driver`).
"""

from __future__ import annotations

import os
import time

from tfyarn.client import appspec, history, rm, staging
from tfyarn.client.cluster import ClientOptions, rest_client, web_login
from tfyarn.core.errors import (
    EnvironmentMissing,
    SpecError,
)
from tfyarn.core.tfconfig import history_dir
from tfyarn.core.timing import KEPT_PAGE_POLL_S
from tfyarn.hdfs import webhdfs


def kept_task_lines(app_id: str, opts: ClientOptions, wait_s: float = 0.0) -> list[str]:
    """A finished job's task table, from the page its driver kept at the end (or one
    line, in parentheses, saying why there is none). `wait_s`: how long a page not there
    yet may still come (the driver keeps it after YARN has the final status)."""
    until = time.monotonic() + wait_s
    try:
        shelf = cluster_shelf(opts)
        reader = history.HistoryReader([shelf])
        while (view := reader.view(app_id)) is None and time.monotonic() < until:
            time.sleep(KEPT_PAGE_POLL_S)
    except EnvironmentMissing as exc:  # no NameNode named, HDFS down, no login
        return [f"(its kept page could not be read: {exc})"]
    if view is None:
        return [f"(no kept page in {shelf.where}: its driver did not save one (killed by "
                "YARN, or an older tfyarn); the diagnostics above list every task's end)"]
    return history.task_lines(view)


def cluster_shelf(opts: ClientOptions, where: str | None = None) -> history.HdfsShelf:
    """The cluster's history dir (tfyarn.yaml's `history: dir:`, else the user's), or
    `where`, read over WebHDFS as this client's login."""
    settings, conf_dir = opts.settings, opts.hadoop_conf
    folder = where or history_dir(staging.load_defaults(settings, conf_dir).history_dir,
                                  settings.user)
    return history.HdfsShelf(folder, webhdfs.client_for(folder, conf_dir, settings.user,
                                                        web_login(opts)))


def history_of(opts: ClientOptions, dirs: tuple[str, ...]) -> history.HistoryReader:
    """What `tfyarn history` lists: the given dirs (hdfs:// or local), else the cluster's
    (where a Hadoop configuration is) and local jobs'; the running jobs of both."""
    settings, conf_dir = opts.settings, opts.hadoop_conf
    yarn = conf_dir is not None and os.path.isdir(conf_dir)
    shelves: list[history.Shelf] = [
        cluster_shelf(opts, d) if "://" in d else history.LocalShelf(d) for d in dirs]
    notes = []
    if not dirs:
        shelves.append(history.LocalShelf(settings.local_history(), mine=True))
        if not yarn:
            notes.append("no Hadoop configuration (HADOOP_CONF_DIR, -conf): local jobs only")
        else:  # the cluster's, where its configuration names one
            try:
                shelves.insert(0, cluster_shelf(opts))
            except EnvironmentMissing as exc:
                notes.append(f"the cluster's kept pages are not listed: {exc}")

    def running_apps() -> list[history.Listed]:
        try:
            apps = rest_client(opts).apps(appspec.APP_TAG, rm.ACTIVE_STATES)
        except rm.Unavailable as exc:
            raise EnvironmentMissing(str(exc)) from None
        return history.running_yarn(apps)

    def running_local() -> list[history.Listed]:
        return history.running_local(settings.tmpdir)

    def job_dir(job_id: str) -> str | None:
        from tfyarn.client.jobdir import find_job_dir

        return find_job_dir(job_id, settings) if job_id.startswith("local_") else None
    running = [running_apps, running_local] if yarn else [running_local]
    return history.HistoryReader(shelves, running, job_dir, notes)


def history_gate(opts: ClientOptions, keytab: str) -> history.Gate:
    """`tfyarn history --spnego-keytab`'s gate: viewers by SPNEGO with that service
    keytab, YARN's admins (yarn-site's yarn.admin.acl, where the site sets it) shown all.
    SpecError where the keytab is missing, gives no key, or is readable by every user of
    this host (anyone could then pose as this server)."""
    import stat

    from tfyarn.core.jobspec import yarn_acl
    from tfyarn.hdfs import spnego
    from tfyarn.hdfs.siteconf import read_site

    try:
        mode = os.stat(keytab).st_mode
    except OSError as exc:
        raise SpecError(f"--spnego-keytab {keytab}: {exc.strerror}; pass the keytab holding "
                        "HTTP/HOST@REALM for this host") from None
    if mode & stat.S_IROTH:
        raise SpecError(f"--spnego-keytab {keytab}: every user of this host can read it "
                        f"(mode {stat.S_IMODE(mode):o}), so any of them could pose as this "
                        f"server; chmod o-r {keytab}")
    acceptor = spnego.Acceptor(keytab)
    acceptor.check()
    conf = opts.hadoop_conf
    site = read_site(os.path.join(conf, "yarn-site.xml")) if conf else {}
    admins = site.get("yarn.admin.acl")
    return history.Gate(acceptor, yarn_acl(admins) if admins is not None else ())

