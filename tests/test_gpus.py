"""GPUs on YARN without a GPU: which devices a container's tasks get, and which requests
the cluster can never meet.

The NodeManager's and ResourceManager's answers are served from
tests/fixtures/hadoop-3.3.6-gpus/: captured from the sandbox's NodeManagers (no isolation:
no device assigned), or, for a node that assigns devices, made by Hadoop 3.3.6's own
classes (tests/java/GpuResourceAnswer.java), which first reproduce the captured answer
byte for byte (checked here where Hadoop and a JDK are).
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tfyarn.core import capacity
from tfyarn.core.jobspec import JobSpec, Resources, Role
from tfyarn.core.records import Cluster
from tfyarn.core.tfconfig import container_devices
from tfyarn.protocol import kv as kvmod
from tfyarn.runtime import nodegpus

FIX = Path(__file__).parent / "fixtures" / "hadoop-3.3.6-gpus"
SECURE = Path(__file__).parent / "fixtures" / "hadoop-3.3.6-secure"
OURS = "container_e32_1795778677278_0002_01_000002"  # index 3 in the isolated answer
TWO = "container_e32_1795778677278_0002_01_000003"  # indexes 0 and 1
HADOOP_HOME = Path(os.environ.get("HADOOP_HOME")
                   or Path.home() / ".cache" / "tfyarn" / "hadoop-3.3.6")


def fixture(name: str) -> dict:
    return json.loads((FIX / name).read_text())


# ---------------------------------------------------------------- the NodeManager's answer


def test_an_isolating_node_lists_each_containers_devices_by_index():
    answer = fixture("nm-resources-gpu-isolated-assigned.json")
    assert nodegpus.assigned_in(answer, OURS) == ("3",)
    assert nodegpus.assigned_in(answer, TWO) == ("0", "1")
    assert nodegpus.assigned_in(answer, "container_e32_1795778677278_0002_01_000009") == ()


def test_a_node_without_isolation_or_without_gpus_assigns_none():
    assert nodegpus.assigned_in(fixture("nm-resources-gpu-node1-running.json"), OURS) is None
    assert nodegpus.assigned_in(fixture("nm-resources-gpu-node3-none.json"), OURS) is None


def test_cuda_sees_the_assigned_cards_and_dockers_renumbering():
    assert container_devices(1, {}, ("3",)) == (["3"], None)
    assert container_devices(2, {"CUDA_VISIBLE_DEVICES": "0"}, ("0", "1")) == (["0", "1"], None)
    # YARN's docker runtime passed host cards 3 and 5: inside they are 0 and 1
    assert container_devices(2, {"NVIDIA_VISIBLE_DEVICES": "3,5"}, None) == (["0", "1"], None)
    assert container_devices(1, {"NVIDIA_VISIBLE_DEVICES": "3"}, ("3",)) == (["0"], None)
    # a site's own setting where YARN says nothing
    assert container_devices(2, {"CUDA_VISIBLE_DEVICES": "4,6,7"}) == (["4", "6"], None)
    devices, guess = container_devices(1, {"NVIDIA_VISIBLE_DEVICES": "all"}, None)
    assert devices == ["0"] and guess == (
        "1 GPU asked, YARN did not say which: using CUDA_VISIBLE_DEVICES=0")
    devices, guess = container_devices(2, {}, ())
    assert devices == ["0", "1"] and "its NodeManager assigned it none" in (guess or "")
    assert container_devices(0, {"CUDA_VISIBLE_DEVICES": "0"}, ("1",)) == ([], None)


class _Answers(http.server.BaseHTTPRequestHandler):
    """A NodeManager's GPU page, serving fixture bytes as they were captured/made."""

    status = 200
    headers_file: Path | None = None
    body = b""
    paths: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).paths.append(self.path)
        self.send_response(self.status)
        if self.headers_file is not None:
            for line in self.headers_file.read_text().splitlines()[1:]:
                if ":" in line and not line.lower().startswith("content-length"):
                    key, value = line.split(":", 1)
                    self.send_header(key.strip(), value.strip())
        else:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def node_manager(body: bytes, status: int = 200, headers_file: Path | None = None
                 ) -> Iterator[tuple[int, type[_Answers]]]:
    handler = type("Answers", (_Answers,), {"status": status, "body": body,
                                            "headers_file": headers_file, "paths": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], handler
    finally:
        server.shutdown()
        server.server_close()


def nm_env(port: int, container: str = OURS) -> dict[str, str]:
    return {"NM_HOST": "127.0.0.1", "NM_HTTP_PORT": str(port), "CONTAINER_ID": container}


def test_the_launcher_asks_its_own_node_for_its_own_container():
    body = (FIX / "nm-resources-gpu-isolated-assigned.json").read_bytes()
    with node_manager(body) as (port, handler):
        assert nodegpus.ask_node(nm_env(port), None) == nodegpus.Assignment(("3",), "", 15360)
        assert nodegpus.ask_node(nm_env(port, TWO), None).devices == ("0", "1")
    assert handler.paths == ["/ws/v1/node/resources/yarn.io%2Fgpu"] * 2


def test_a_node_that_isolates_nothing_is_said_so():
    body = (FIX / "nm-resources-gpu-node1-running.json").read_bytes()
    with node_manager(body) as (port, _):
        got = nodegpus.ask_node(nm_env(port), None)
    assert got.devices is None and "isolates no GPU" in got.why


def test_a_kerberized_node_without_a_login_is_said_so_with_the_fix():
    body = (SECURE / "nm-containerlogs-no-ticket.body").read_bytes()
    headers = SECURE / "nm-containerlogs-no-ticket.headers"
    with node_manager(body, 401, headers) as (port, _):
        got = nodegpus.ask_node(nm_env(port), None)
    assert got.devices is None and "--keytab" in got.why and "SPNEGO" in got.why


def test_outside_yarn_nothing_is_asked():
    assert nodegpus.ask_node({}, None).devices is None


def run_launcher(tmp_path: Path, gpus: int, env: dict[str, str], workers: int = 1,
                 per_container: int = 1, show: str = "${TF_FORCE_GPU_ALLOW_GROWTH:-}",
                 fraction: float | None = None) -> tuple[list[str], str]:
    """One real launcher (`--gpus auto`, as on YARN) whose tasks print their
    CUDA_VISIBLE_DEVICES and `show`; the test plays the driver through the directory
    store."""
    job_id = f"test_{uuid.uuid4().hex[:8]}"
    spec = JobSpec("t", "tensorflow-worker", (Role("worker", workers, Resources(1024, 1, gpus)),),
                   f'echo "$CUDA_VISIBLE_DEVICES|{show}" > devices-$TFYARN_TASK_INDEX.txt',
                   tasks_per_container=per_container, gpu_memory_fraction=fraction)
    tasks = spec.tasks()[:per_container]
    (tmp_path / "job.json").write_text(spec.to_json())
    store = kvmod.Scoped(kvmod.DirKV(str(tmp_path / "kv")), 0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfyarn.runtime.launcher", "--job", str(tmp_path / "job.json"),
         "--tasks", ",".join(map(str, tasks)), "--kv", f"dir:{tmp_path / 'kv'}",
         "--gpus", "auto", "--no-watchdog"],
        cwd=tmp_path, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        env={**{k: v for k, v in os.environ.items()
                if k not in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")},
             "TFYARN_JOB_ID": job_id, "TFYARN_ADVERTISE_HOST": "127.0.0.1", **env})
    addrs = [store.wait(kvmod.addr_key(t), timeout=30) for t in tasks]
    assert all(addrs), "the launcher never registered"
    store.put(kvmod.CLUSTER, Cluster({"worker": tuple(addrs)}).to_json())
    _, err = proc.communicate(timeout=60)
    seen = [(tmp_path / f"devices-{t.index}.txt").read_text().strip() for t in tasks]
    return seen, err.decode()


def test_a_launcher_gives_its_task_the_device_yarn_assigned(tmp_path):
    body = (FIX / "nm-resources-gpu-isolated-assigned.json").read_bytes()
    with node_manager(body) as (port, _):
        seen, err = run_launcher(tmp_path, 1, nm_env(port))
    assert seen == ["3|"], err
    assert "YARN did not say" not in err


def test_two_workers_of_a_shared_card_get_the_assigned_one(tmp_path):
    body = (FIX / "nm-resources-gpu-isolated-assigned.json").read_bytes()
    with node_manager(body) as (port, _):  # -wnpg 2 -wg 1 on the container assigned 0,1
        seen, err = run_launcher(tmp_path, 1, nm_env(port, TWO), workers=2, per_container=2)
    assert seen == ["0|", "0|"], err  # capped (below), so no allow-growth


def test_a_launcher_on_a_node_without_isolation_says_it_guesses(tmp_path):
    body = (FIX / "nm-resources-gpu-node1-running.json").read_bytes()
    with node_manager(body) as (port, _):
        seen, err = run_launcher(tmp_path, 1, nm_env(port))
    assert seen == ["0|"]
    assert ("1 GPU asked, YARN did not say which: using CUDA_VISIBLE_DEVICES=0 (node "
            "127.0.0.1 isolates no GPU") in err


def test_under_yarns_docker_runtime_the_card_is_number_0(tmp_path):
    seen, err = run_launcher(tmp_path, 1, {"NVIDIA_VISIBLE_DEVICES": "3"})
    assert seen == ["0|"], err


# ---------------------------------------------------------------- made by Hadoop's classes


@pytest.fixture(scope="module")
def answer_tool(tmp_path_factory) -> list[str]:
    """tests/java/GpuResourceAnswer.java, compiled against Hadoop 3.3.6: the command."""
    def missing(what: str) -> None:
        if os.environ.get("TFYARN_REQUIRE_HADOOP") == "1":
            pytest.fail(f"TFYARN_REQUIRE_HADOOP=1 but {what} is missing")
        pytest.skip(f"{what} is missing: install Hadoop with scripts/yarn-sandbox start")
    if not (HADOOP_HOME / "bin" / "hadoop").exists():
        missing(f"Hadoop ({HADOOP_HOME})")
    if not shutil.which("javac"):
        missing("javac")
    cp = subprocess.run([str(HADOOP_HOME / "bin" / "hadoop"), "classpath", "--glob"],
                        capture_output=True, text=True, check=True).stdout.strip()
    classes = tmp_path_factory.mktemp("gpu-answer")
    subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", cp,
                    str(Path(__file__).parent / "java" / "GpuResourceAnswer.java")], check=True)
    # JAXB (the GPU plugin's XML parser) needs java.lang opened on JDK 17, as the
    # NodeManager's own launch scripts do
    return ["java", "--add-opens", "java.base/java.lang=ALL-UNNAMED", "-cp",
            f"{classes}:{cp}", "GpuResourceAnswer"]


def test_hadoops_classes_reproduce_the_captured_answer(answer_tool):
    made = subprocess.run([*answer_tool, str(FIX / "nvidia-smi-node1.xml")],
                          capture_output=True, check=True).stdout
    assert made == (FIX / "nm-resources-gpu-node1-running.json").read_bytes()


def test_the_isolated_fixture_is_what_hadoops_classes_make(answer_tool):
    made = subprocess.run([*answer_tool, str(FIX / "nvidia-smi-4-gpus.xml"), "isolated",
                           f"3={OURS}", f"0={TWO}", f"1={TWO}"],
                          capture_output=True, check=True).stdout
    assert made == (FIX / "nm-resources-gpu-isolated-assigned.json").read_bytes()


# ---------------------------------------------------------------- what the cluster can give


def nodes() -> list[capacity.Node]:
    return capacity.nodes_of(fixture("rm-cluster-nodes-gpu-job.json"))


def maximum() -> capacity.Amount | None:
    return capacity.queue_maximum(fixture("rm-scheduler-gpus.json"), "default")


def ask(gpus: int = 0, mb: int = 1024, vcores: int = 1, name: str = "worker:0") -> capacity.Ask:
    return capacity.Ask(name, capacity.Amount(mb, vcores, gpus), "-wm", "-wc", "-wg")


def test_the_sandboxs_nodes_and_queue_as_the_resourcemanager_reports_them():
    assert [(n.id, n.total.gpus, n.used.gpus) for n in nodes()] == [
        ("127.0.0.3:8041", 0, 0), ("127.0.0.1:8041", 2, 1), ("127.0.0.2:8041", 1, 1)]
    m = maximum()
    assert m is not None and (m.memory_mb, m.vcores) == (4096, 4)
    assert m.gpus == capacity.UNBOUNDED  # YARN sets no GPU maximum: the nodes decide


def test_a_container_no_node_can_hold_is_refused_naming_the_flag_and_the_most():
    assert capacity.unfit([ask(gpus=3)], nodes(), maximum(), "default") == (
        "-wg 3: no node of this cluster has more than 2 GPUs for queue default (worker:0's "
        "container); use -wg 2 or less")
    assert capacity.unfit([ask(mb=900000)], nodes(), maximum(), "default") == (
        "-wm 900000: the largest container queue default can have on this cluster is 4096 "
        "MB (worker:0's container); use -wm 4096 or less")
    ps = capacity.Ask("ps:0", capacity.Amount(1024, 9, 0), "-pm", "-pc", "-wg")
    assert capacity.unfit([ps], nodes(), maximum(), "default").startswith("-pc 9: ")
    assert capacity.unfit([ask(gpus=2, mb=4096, vcores=4)], nodes(), maximum(),
                          "default") is None


def test_gpus_asked_of_gpu_less_nodes_or_labels_are_refused():
    cpu_only = [n for n in nodes() if n.total.gpus == 0]
    assert capacity.unfit([ask(gpus=1)], cpu_only, maximum(), "default").startswith(
        "-wg 1: no node of this cluster has a GPU (yarn.io/gpu) that queue default may use")
    assert capacity.unfit([ask(gpus=1)], nodes(), maximum(), "default", "gpu") is None
    assert capacity.unfit([ask(gpus=1)], [], maximum(), "default") is None


def test_a_gang_that_waits_says_for_what_and_who_holds_it():
    holders = capacity.holders_of(fixture("rm-cluster-apps-gpu-job.json"))
    assert [(h.app_id, h.held.gpus) for h in holders] == [
        ("application_1795778677278_0002", 2)]
    assert capacity.waiting_for([ask(gpus=2, name="worker:2")], nodes(), holders,
                                "application_9") == (
        "worker:2 waits for 2 GPUs: the cluster has 3, 1 free, 2 held by "
        "application_1795778677278_0002 (2)")
    assert capacity.waiting_for([ask(gpus=1)], nodes(), holders, "x") is None  # node 1 has one


def test_the_jobs_containers_as_asks(tmp_path):
    spec = JobSpec("t", "tensorflow-ps", (Role("ps", 1, Resources(2000, 1)),
                                          Role("worker", 2, Resources(2000, 1, 1))), "true")
    got = [(a.name, a.amount.gpus, a.memory_flag, a.vcores_flag)
           for a in capacity.asks_of(spec)]
    assert got == [("the ApplicationMaster", 0, "--am-memory", "--am-vcores"),
                   ("ps:0", 0, "-pm", "-pc"), ("worker:0", 1, "-wm", "-wc"),
                   ("worker:1", 1, "-wm", "-wc")]
    assert [a.name for a in capacity.asks_of(spec, ["worker-1"])] == ["worker:1"]


# ---------------------------------------------------------------- workers sharing a card


def test_two_workers_of_a_card_each_get_a_cap_of_about_half(tmp_path):
    body = (FIX / "nm-resources-gpu-isolated-assigned.json").read_bytes()
    with node_manager(body) as (port, _):  # the answer says the card has 15360 MiB
        seen, err = run_launcher(tmp_path, 1, nm_env(port, TWO), workers=2, per_container=2,
                                 show="$TFYARN_GPU_MEMORY_FRACTION|$TFYARN_GPU_MEMORY_MB")
    assert seen == ["0|0.45|6912", "0|0.45|6912"], err


def test_the_cap_is_an_option(tmp_path):
    body = (FIX / "nm-resources-gpu-isolated-assigned.json").read_bytes()
    with node_manager(body) as (port, _):
        seen, err = run_launcher(tmp_path, 1, nm_env(port, TWO), workers=2, per_container=2,
                                 show="$TFYARN_GPU_MEMORY_FRACTION|$TFYARN_GPU_MEMORY_MB",
                                 fraction=0.25)
    assert seen == ["0|0.25|3840", "0|0.25|3840"], err


HOOK_CHECK = r"""
import os, sys
import {module}
print("{module}", {probe})
"""


def hooked(tmp_path: Path, module: str, probe: str, env: dict[str, str]) -> str:
    """A task's python with the launcher's hook on its PYTHONPATH and the cap's env,
    importing `module` and printing what `probe` finds."""
    from tfyarn.hdfs.plugin import plugin_env

    base = {k: v for k, v in os.environ.items() if not k.startswith("TFYARN_")}
    full = {**base, "TFYARN_HDFS_PLUGIN": "off", **env}
    full.update(plugin_env(full))
    script = tmp_path / "check.py"
    script.write_text(HOOK_CHECK.format(module=module, probe=probe))
    out = subprocess.run([sys.executable, str(script)], env=full, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip() + "\n" + out.stderr


def test_tensorflow_loads_with_the_cap_applied_before_user_code(tmp_path):
    pytest.importorskip("tensorflow")
    out = hooked(tmp_path, "tensorflow",
                 "[str(c) for c in __import__('tensorflow').config.list_physical_devices('GPU')],"
                 " __import__('tensorflow').config.list_logical_devices('CPU') != []",
                 {"TFYARN_GPU_MEMORY_FRACTION": "0.45", "TFYARN_GPU_MEMORY_MB": "6912",
                  "CUDA_VISIBLE_DEVICES": ""})
    # no GPU here: the hook ran (it would say so on stderr had TF refused the limit)
    assert out.startswith("tensorflow [] True"), out
    assert "not set" not in out


def test_torch_gets_its_fraction_at_cudas_lazy_init(tmp_path):
    pytest.importorskip("torch")
    out = hooked(tmp_path, "torch",
                 "any(getattr(c[0], '__name__', '') == 'cap' for c in "
                 "getattr(__import__('torch').cuda, '_queued_calls', []))",
                 {"TFYARN_GPU_MEMORY_FRACTION": "0.45"})
    assert out.startswith("torch True"), out  # queued, CUDA not initialized by the import
    assert "not set" not in out


def test_the_cap_option_is_checked_where_it_is_parsed(tmp_path):
    from tfyarn.api.options import ElSubmitArgs, from_el_submit
    from tfyarn.core.errors import SpecError

    def parse(**kw):
        return from_el_submit(ElSubmitArgs(command=("true",), kind="tensorflow-worker", **kw),
                              str(tmp_path))
    assert parse(worker_gpus="1", gpu_memory_fraction="0.3").gpu_memory_fraction == 0.3
    assert parse(worker_gpus="1").gpu_memory_fraction is None
    with pytest.raises(SpecError, match=r"^--gpu-memory-fraction: caps .* -wg is 0; add -wg 1"):
        parse(gpu_memory_fraction="0.5")
    with pytest.raises(SpecError, match=r"^--gpu-memory-fraction: give a share .* \(got '1.5'\)"):
        parse(worker_gpus="1", gpu_memory_fraction="1.5")
