"""tfyarn's build of skein's ApplicationMaster on the sandbox's YARN (#42): the jar a
running application's AM runs is the patched one, and a second AM attempt knows it is
one (patch 0004), and it comes from the user's one HDFS copy, never from one another user
could write (0016). The preemption notice (patch 0005) is checked where a preemption
happens, in test_cluster.py; the watch race (0002) in tests/test_skein_build.py and
test_skein_store.py.

The AM's JVM maps its classes from the user's class-data archive (0017), dumped by a first
AM as it exits, never from one another user could write.

A plain skein application here, not a tfyarn job: the master script is the driver."""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
import pwd
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import final_state, wait_until

from tfyarn.hdfs import webhdfs
from tfyarn.protocol.skeinlink import tfyarns_skein

pytestmark = pytest.mark.concurrent  # may share the cluster (integration/conftest.py)

RM = "http://127.0.0.1:8088/ws/v1/cluster"
# Attempt 1 kills its own ApplicationMaster (the driver's parent JVM), as a lost node
# would; attempt 2 reports what it was told, and the version of the jar it runs from
# (localized in its container as .skein.jar), then waits to be killed.
SCRIPT = """\
if [ "$SKEIN_AM_ATTEMPT" = 1 ]; then kill -9 "$PPID"; exec sleep 600; fi
python - <<'EOF'
import os, zipfile, skein
manifest = zipfile.ZipFile(".skein.jar").read("META-INF/MANIFEST.MF").decode()
version = [line.split(": ", 1)[1].strip() for line in manifest.splitlines()
           if line.startswith("Implementation-Version: ")][0]
told = f"{os.environ['SKEIN_AM_ATTEMPT']}/{os.environ['SKEIN_AM_MAX_ATTEMPTS']} {version}"
skein.ApplicationClient.from_current().kv["told"] = told.encode()
EOF
exec sleep 600
"""


@pytest.fixture
def skein_client():
    skein = tfyarns_skein()
    with skein.Client() as client:
        yield client


def told_by_the_running_attempt(client, app_id: str, deadline_s: float) -> str:
    """The "told" key of the application's store, across AM attempts (a store goes with
    its AM: the first attempt's connection fails, the second's answers)."""
    skein = tfyarns_skein()
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            app = client.connect(app_id, wait=True)
            return app.kv.wait("told").decode()
        except (skein.exceptions.ConnectionError, skein.exceptions.ApplicationError,
                skein.exceptions.ApplicationNotRunningError):
            time.sleep(1)  # between attempts: the next one is not up yet
    raise AssertionError(f"no attempt of {app_id} told anything in {deadline_s:g} s")


def test_a_second_am_attempt_knows_it_is_one_and_runs_the_patched_jar(skein_client, apps):
    skein = tfyarns_skein()
    spec = skein.ApplicationSpec(
        name="tfyarn-am-attempts", queue="default", max_attempts=2,
        master=skein.Master(script=SCRIPT, resources=skein.Resources(memory=512, vcores=1)))
    app_id = skein_client.submit(spec)
    apps.append(app_id)
    told = told_by_the_running_attempt(skein_client, app_id, 300)
    assert told == f"2/2 {skein.__version__}", told
    with urllib.request.urlopen(f"{RM}/apps/{app_id}/appattempts", timeout=30) as r:
        attempts = json.load(r)["appAttempts"]["appAttempt"]
    assert [int(a["id"]) for a in attempts] == [1, 2], attempts
    skein_client.kill_application(app_id)
    wait_until(lambda: final_state(app_id).startswith("KILLED"), 120, f"{app_id} KILLED")


# The master reports the file its container runs skein's jar from (.skein.jar's target:
# a PRIVATE resource lies in the user's filecache, an APPLICATION one in appcache/APP).
JAR_SCRIPT = """\
python - <<'EOF'
import os, skein
skein.ApplicationClient.from_current().kv["jar"] = os.path.realpath(".skein.jar").encode()
EOF
exec sleep 600
"""
OWNER = pwd.getpwuid(os.geteuid()).pw_name


def hdfs_as(user: str):
    """WebHDFS as `user` (the plain sandbox: simple authentication)."""
    return webhdfs.client_for("hdfs:///", os.environ["HADOOP_CONF_DIR"], user)


def am_jar(client, apps: list[str]) -> tuple[str, list[str]]:
    """A plain skein application's AM: the file it ran skein's jar from, and the names
    staged for it in HDFS (~/.skein/APP); killed after."""
    skein = tfyarns_skein()
    spec = skein.ApplicationSpec(
        name="tfyarn-am-jar", queue="default",
        master=skein.Master(script=JAR_SCRIPT, resources=skein.Resources(memory=512, vcores=1)))
    app_id = client.submit(spec)
    apps.append(app_id)
    try:
        staged = hdfs_as(OWNER).list(f"/user/{OWNER}/.skein/{app_id}")
        return client.connect(app_id, wait=True).kv.wait("jar").decode(), staged
    finally:
        client.kill_application(app_id)


@pytest.mark.exclusive  # replaces the copy that other applications' AMs localize
def test_the_am_runs_the_users_one_copy_of_the_jar_and_never_one_others_could_write(
        skein_client, apps):
    """Patch 0016: skein's jar is not staged per application but kept once per user at
    ~/.skein/jars/SHA256.jar (0600, dir 0700) and localized as a PRIVATE resource. A copy
    that others could write, or that another user wrote (this sandbox's HDFS does not
    enforce permissions, as some clusters' do not; the Kerberized one's refuses them:
    test_kerberos.py), is not run: that application gets the jar staged as before, and
    the copy is never rewritten by the driver."""
    jar = Path(tfyarns_skein().__file__).parent / "java" / "skein.jar"
    shared = f"/user/{OWNER}/.skein/jars/{hashlib.sha256(jar.read_bytes()).hexdigest()}.jar"
    mine = hdfs_as(OWNER)
    ran, staged = am_jar(skein_client, apps)
    before = mine.status(shared)
    assert (before["owner"], before["permission"], before["length"]) == \
        (OWNER, "600", jar.stat().st_size), before
    assert mine.status(posixpath.dirname(shared))["permission"] == "700"
    assert f"/usercache/{OWNER}/filecache/" in ran and "/appcache/" not in ran, ran
    assert not any(name.endswith(".jar") for name in staged), staged
    mine.set_permission(shared, "666")  # as if another user could have replaced it
    try:
        ran, staged = am_jar(skein_client, apps)
    finally:
        mine.set_permission(shared, "600")
    assert "/appcache/" in ran and "skein.jar" in staged, (ran, staged)
    assert mine.status(shared)["modificationTime"] == before["modificationTime"]
    hdfs_as("tfyarn-mallory").write(shared, b"not skein", overwrite=True)
    try:
        ran, staged = am_jar(skein_client, apps)
        assert "/appcache/" in ran and "skein.jar" in staged, (ran, staged)
        assert mine.status(shared)["owner"] == "tfyarn-mallory"  # left for the owner to see
    finally:
        mine.delete(shared)  # the next submission writes the copy again


# The master reports the localized class-data archive its AM's JVM (the driver's parent)
# maps, if any, then waits for the test's word and ends: an AM that ends itself dumps an archive
# where it had none (0017).
ARCHIVE_SCRIPT = """\
AM_PID=$PPID python - <<'EOF'
import os, skein
maps = open(f"/proc/{os.environ['AM_PID']}/maps").read().split("\\n")
mapped = sorted({line.split()[-1] for line in maps  # not the JDK's own archive
                 if line.endswith(".jsa") and "/filecache/" in line})
kv = skein.ApplicationClient.from_current().kv
kv["mapped"] = " ".join(mapped).encode()
kv.wait("done")
EOF
"""


def am_archive(client, apps: list[str]) -> str:
    """A plain skein application that ends itself: the archive file its AM's JVM mapped
    ("" for none)."""
    skein = tfyarns_skein()
    spec = skein.ApplicationSpec(
        name="tfyarn-am-archive", queue="default",
        master=skein.Master(script=ARCHIVE_SCRIPT,
                            resources=skein.Resources(memory=512, vcores=1)))
    app_id = client.submit(spec)
    apps.append(app_id)
    app = client.connect(app_id, wait=True)
    mapped = app.kv.wait("mapped").decode()
    app.kv["done"] = b"1"
    wait_until(lambda: final_state(app_id) == "FINISHED/SUCCEEDED", 120, f"{app_id} ended")
    return mapped


def archives(fs, digest: str) -> list[str]:
    """The user's class-data archives for skein's jar `digest` (one per jar copy and
    cluster)."""
    jars = f"/user/{OWNER}/.skein/jars"
    return [name for name in (fs.list(jars) if fs.status(jars, strict=False) else [])
            if name.startswith(f"{digest}-") and name.endswith(".jsa")]


@pytest.mark.exclusive  # replaces the archive that other applications' AMs map
def test_the_am_maps_the_users_class_archive_and_never_one_others_could_write(
        skein_client, apps):
    """Patch 0017: an AM with no archive dumps one as it exits, kept beside the jar's
    copy as ~/.skein/jars/DIGEST-KEY.jsa (0600); the next AM's JVM maps it (seen in its
    /proc/PID/maps, localized PRIVATE into the user's filecache). One that others could
    write, or another user wrote, is not mapped: the AM loads its classes as before."""
    jar = Path(tfyarns_skein().__file__).parent / "java" / "skein.jar"
    digest = hashlib.sha256(jar.read_bytes()).hexdigest()
    jars, mine = f"/user/{OWNER}/.skein/jars", hdfs_as(OWNER)
    for name in archives(mine, digest):
        mine.delete(f"{jars}/{name}")
    assert am_archive(skein_client, apps) == ""  # none yet: this AM dumps one
    wait_until(lambda: archives(mine, digest), 120, "the first AM's archive kept")
    [name] = archives(mine, digest)
    kept = mine.status(f"{jars}/{name}")
    assert (kept["owner"], kept["permission"]) == (OWNER, "600"), kept
    mapped = am_archive(skein_client, apps)
    assert f"/usercache/{OWNER}/filecache/" in mapped and mapped.endswith(name), mapped
    mine.set_permission(f"{jars}/{name}", "666")  # as if another user could have replaced it
    try:
        assert am_archive(skein_client, apps) == ""
    finally:
        mine.set_permission(f"{jars}/{name}", "600")
    hdfs_as("tfyarn-mallory").write(f"{jars}/{name}", b"not an archive", overwrite=True)
    try:
        assert am_archive(skein_client, apps) == ""
        assert mine.status(f"{jars}/{name}")["owner"] == "tfyarn-mallory"  # left to see
    finally:
        mine.delete(f"{jars}/{name}")  # the next AM dumps one again
