"""Where the driver runs: what differs between local mode and YARN, in one place.

Owns the driver's backend, chosen once where the driver starts (`open_site`, from its
store URL): the job's store, where gangs of launchers come from (`gang`), where the job
page links each task's log, how the page's URL is published (YARN: skein's web UI,
proxied by the ResourceManager), how long the application stays up for TensorBoard
after the verdict, how the job's end is handed over (YARN: the ApplicationMaster's
final status and diagnostics; locally the client reads the status key), where its
final page is kept (`save_page`: the history dir, in HDFS over WebHDFS on YARN), what
is made ready before the first task (`prepare`: on YARN, tfyarn's HDFS dir private), and
which ApplicationMaster attempt runs the driver, with the job's course kept for a later
one (`keep_course`/`kept_course`: on YARN a private file in HDFS, read back only when it
is the user's own). Must not decide the job's course (that is `driver` and
`core.policy`); nothing outside this module asks which backend it runs on.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tfyarn.core.errors import EnvironmentMissing, StoreGone
from tfyarn.core.jobspec import JobSpec, container_name
from tfyarn.core.policy import tasks_section
from tfyarn.core.records import CourseSoFar, JobView, Outcome
from tfyarn.core.say import say
from tfyarn.core.settings import Settings
from tfyarn.core.tfconfig import Task, course_path, history_dir, tfyarn_home
from tfyarn.core.timing import HISTORY_SAVE_S, TENSORBOARD_DONE_SLACK_S
from tfyarn.hdfs import webhdfs
from tfyarn.hdfs.siteconf import read_site
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol.skeinlink import App
from tfyarn.runtime import gang as gangmod
from tfyarn.system import private
from tfyarn.system.serving import same_user_peer

LogLinks = Callable[[Task], "str | None"]


@dataclass
class Site:
    """Local mode: the client owns every process, serves the logs, reads the status."""

    store: kvmod.KV

    def gang(self, spec: JobSpec) -> gangmod.Gang:
        return gangmod.Gang(self.store)

    def log_links(self, spec: JobSpec) -> LogLinks:
        """Each task's log as the job page links it (locally: the page serves the files)."""
        return lambda task: f"logs/{spec.container_of(task).name}"

    def page_url(self, url: str) -> str:
        """The URL the job page is published under."""
        return url

    def page_secret(self, settings: Settings) -> str | None:
        """What the job page asks every request for: locally the owner's secret (a page on
        127.0.0.1 is reachable by every user of the machine)."""
        return private.user_secret(settings.home)

    def page_host(self, host: str) -> str:
        """Where the job page listens."""
        return host

    def page_admit(self) -> Callable[[Any], bool] | None:
        """Who else the page refuses, beyond the secret (docs/security.md)."""
        return None

    def tensorboard_linger_s(self, spec: JobSpec) -> float:
        """How long the driver stays up for TensorBoard after the verdict (locally the
        client keeps the side task up itself)."""
        return 0.0

    def prepare(self, settings: Settings) -> None:
        """Before the first task starts (locally nothing: the job dirs are private)."""

    def finish(self, spec: JobSpec, outcome: Outcome) -> None:
        """Hand the job's end over, once its status is in the store."""

    def am_attempt(self) -> tuple[int, int]:
        """Which ApplicationMaster attempt runs the driver (1 first), of how many
        (locally always 1 of 1: the driver's process is the client's child)."""
        return 1, 1

    def keep_course(self, spec: JobSpec, settings: Settings, so_far: CourseSoFar) -> None:
        """Keep the job's course for a later ApplicationMaster attempt (locally none)."""

    def kept_course(self, spec: JobSpec, settings: Settings) -> CourseSoFar | None:
        """What an earlier ApplicationMaster attempt kept (locally none)."""
        return None

    def forget_course(self, spec: JobSpec, settings: Settings) -> None:
        """The kept course, removed once the job has ended (locally none)."""

    def save_page(self, spec: JobSpec, view: JobView, settings: Settings) -> str:
        """Keep the final page in the history dir (locally a dir the client names) as
        JOB_ID.json, renamed in whole (as the store's puts are); where it went."""
        folder = spec.history_dir or settings.local_history()
        # 0640: a shared history dir's readers are the group's (docs/security.md)
        kvmod.DirKV(folder, mode=0o640).put(f"{view.job_id}.json", view.to_json())
        return os.path.join(folder, f"{view.job_id}.json")


@dataclass
class YarnSite(Site):
    """YARN: skein's ApplicationMaster holds the store, starts containers, ends the app."""

    app: App

    def gang(self, spec: JobSpec) -> gangmod.Gang:
        return gangmod.SkeinGang(self.store, self.app, spec)

    def log_links(self, spec: JobSpec) -> LogLinks:
        """Each task's container log URL on its NodeManager (the newest container of its
        service: after a restart, the current attempt's)."""
        newest: dict[str, Any] = {}  # by container name: a grown one's service differs
        for c in self.app.containers(states=gangmod.STATES):
            name = container_name(c.service_name)
            if name not in newest or _started(c) > _started(newest[name]):
                newest[name] = c

        def link(task: Task) -> str | None:
            c = newest.get(spec.container_of(task).name)
            url = c.yarn_container_logs if c is not None else None
            return url if not url or "://" in url else f"http://{url}"
        return link

    def page_url(self, url: str) -> str:
        return self.app.add_page("tfyarn", url, link_name="tfyarn job")

    def page_secret(self, settings: Settings) -> str | None:
        """None: on YARN the page is reached through skein's web UI and the RM's proxy."""
        return None

    def page_host(self, host: str) -> str:
        """127.0.0.1: skein's web UI runs in this container; nobody on the network reaches
        the page past the RM's proxy (its AmIpFilter) and the application's view ACL."""
        return "127.0.0.1"

    def page_admit(self) -> Callable[[Any], bool] | None:
        """Only this user's processes (skein's web UI), not other users of the node."""
        return same_user_peer

    def prepare(self, settings: Settings) -> None:
        """tfyarn's HDFS dir (`tfyarn_home`: default checkpoints, models and kept pages)
        made 0700 before any task writes under it (`webhdfs.private_dir`: one left 0755
        by HDFS's default is tightened). A NameNode that cannot be reached costs a line
        here, not the job (HISTORY_SAVE_S at most)."""
        home = tfyarn_home(settings.user)
        conf = settings.hadoop_conf_dir
        core = read_site(os.path.join(conf, "core-site.xml")) if conf else {}
        if not core.get("fs.defaultFS", "").startswith("hdfs://"):
            return  # no HDFS home: the defaults are given elsewhere
        try:
            client = webhdfs.container_client(home, conf, settings.user, settings.token_file,
                                              HISTORY_SAVE_S)
            with webhdfs.failing_as(f"making {home} private"):
                done = webhdfs.private_dir(client, webhdfs.hdfs_path(home))
            if done == "tightened":
                say(f"{home} was 0755 (HDFS's default: every cluster user reads the models "
                    "and checkpoints in it); made it 0700. Any other mode is kept", "driver")
        except EnvironmentMissing as exc:
            say(f"{exc}: dirs tfyarn makes under it may be readable by other users", "driver")

    def tensorboard_linger_s(self, spec: JobSpec) -> float:
        """--tensorboard-linger keeps the application (so the TensorBoard container) up."""
        return spec.tensorboard_linger_s if spec.tensorboard_dir else 0.0

    def finish(self, spec: JobSpec, outcome: Outcome) -> None:
        """Linger for TensorBoard when asked, then give the AM the final status and a
        diagnostics text naming the task, its stderr and every task's end. The AM hands
        it to the ResourceManager before this returns (skein patch 0012): the job has
        ended for YARN and its clients, and the driver keeps its page after."""
        self.linger_for_tensorboard(spec)
        diagnostics = "\n".join([outcome.message, *outcome.excerpt(), *tasks_section(outcome)])
        try:
            self.app.shutdown(outcome.state, spec.redactor()(diagnostics))
        except StoreGone as exc:  # the master script's exit code still carries the status
            say(f"could not set the final status through skein: {exc!r}", "driver")

    def am_attempt(self) -> tuple[int, int]:
        """From skein's AM (patch 0004). YARN starts the AM again on another node when
        its node is lost, up to --am-attempts (capped by the cluster), and a node loss
        never counts toward that (YARN-614): attempt 3 of 2 happens; --max-restarts is
        what bounds a job's resumes."""
        return (int(os.environ.get("SKEIN_AM_ATTEMPT") or 1),
                int(os.environ.get("SKEIN_AM_MAX_ATTEMPTS") or 1))

    def keep_course(self, spec: JobSpec, settings: Settings, so_far: CourseSoFar) -> None:
        """In the user's own HDFS dir (`tfyarn_home`, 0700), 0600, renamed in whole; only
        where a later AM attempt may read it. Raises EnvironmentMissing."""
        if self.am_attempt()[1] >= 2:
            self.keep_course_file(settings, so_far)

    def keep_course_file(self, settings: Settings, so_far: CourseSoFar) -> None:
        client, path = self._course_file(settings)
        with webhdfs.failing_as("keeping the job's course for a later ApplicationMaster"):
            webhdfs.put_text(client, path, so_far.to_json(), permission="600")

    def kept_course(self, spec: JobSpec, settings: Settings) -> CourseSoFar | None:
        """The course an earlier AM attempt kept: read only when the file is the user's own
        and nobody else may write it (another cluster user cannot steer the job with a
        planted one); None where there is none. An AM lost between the old file's delete and
        the rename left only the new one, whole, under its temporary name: that is read
        then. Raises EnvironmentMissing."""
        client, path = self._course_file(settings)
        with webhdfs.failing_as("reading the course an earlier ApplicationMaster kept"):
            for where in (path, webhdfs.put_temp(path)):
                st = client.status(where, strict=False)
                if st is not None:
                    break
            else:
                return None
            if st.get("owner") != settings.user or int(st.get("permission", "777"), 8) & 0o022:
                say(f"{where} is not {settings.user}'s own private file "
                    f"(owner {st.get('owner')}, mode {st.get('permission')}): not read", "driver")
                return None
            with client.read(where, encoding="utf-8") as f:
                return CourseSoFar.from_json(f.read(), where)

    def forget_course(self, spec: JobSpec, settings: Settings) -> None:
        if self.am_attempt()[1] < 2:
            return
        client, path = self._course_file(settings)
        with webhdfs.failing_as("removing the job's kept course"):
            client.delete(path)
            client.delete(webhdfs.put_temp(path))

    def _course_file(self, settings: Settings) -> tuple[Any, str]:
        where = course_path(settings.user, settings.job_id or "unknown")
        client = webhdfs.container_client(where, settings.hadoop_conf_dir, settings.user,
                                          settings.token_file, HISTORY_SAVE_S)
        return client, webhdfs.hdfs_path(where)

    def save_page(self, spec: JobSpec, view: JobView, settings: Settings) -> str:
        """In HDFS, over WebHDFS with the container's delegation token (no JVM here)."""
        folder = history_dir(spec.history_dir, settings.user)
        client = webhdfs.container_client(folder, settings.hadoop_conf_dir, settings.user,
                                          settings.token_file, HISTORY_SAVE_S)
        path = posixpath.join(webhdfs.hdfs_path(folder), f"{view.job_id}.json")
        with webhdfs.failing_as(f"saving the job's page to {folder}"):
            webhdfs.put_text(client, path, view.to_json())
        return f"{folder.rstrip('/')}/{view.job_id}.json"

    def linger_for_tensorboard(self, spec: JobSpec) -> None:
        """Until the side task says it is done: after the linger, or sooner when killed;
        not at all when TensorBoard never answered."""
        linger = self.tensorboard_linger_s(spec)
        if not linger or self.store.get(kvmod.TENSORBOARD) is None:
            return
        say(f"keeping the application for TensorBoard ({linger / 60:g} min)", "driver")
        with contextlib.suppress(StoreGone):
            self.store.wait(kvmod.TENSORBOARD_DONE, timeout=linger + TENSORBOARD_DONE_SLACK_S)


def _started(c: Any) -> tuple[int, str]:
    """The order containers were given in (YARN's container ids count up)."""
    cid = c.yarn_container_id or ""
    return (len(cid), cid)


def open_site(url: str) -> Site:
    """`dir:/path` (local mode) or `skein:` (inside the ApplicationMaster)."""
    scheme, _, _ = url.partition(":")
    if scheme == "skein":
        app = App.current()
        return YarnSite(kvmod.SkeinKV(app), app)
    return Site(kvmod.open_kv(url, ringer=True, watcher=True))  # launchers wait on its bell
