"""tfyarn's build of skein's ApplicationMaster on the sandbox's YARN (#42): the jar a
running application's AM runs is the patched one, and a second AM attempt knows it is
one (patch 0004). The preemption notice (patch 0005) is checked where a preemption
happens, in test_cluster.py; the watch race (0002) in tests/test_skein_build.py and
test_skein_store.py.

A plain skein application here, not a tfyarn job: the master script is the driver."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
from conftest import final_state, wait_until

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
