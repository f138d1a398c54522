"""tfyarn's build of skein (scripts/build-skein, #42): the watch race fixed in its
ApplicationMaster and its containers started in parallel (each checked against PyPI's
0.8.2 jar too, where it fails), an application's attempts read back as set, and PyPI's
build refused on the gateway with what to run instead.

The Java checks (tests/java/*.java) are compiled against a skein jar and run
with Hadoop's classpath (the sandbox's Hadoop, `scripts/yarn-sandbox` installs it): it
skips saying so where there is no Hadoop or JDK, and fails under TFYARN_REQUIRE_HADOOP=1
(CI)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import REPO

from tfyarn.core.errors import EXIT_TFYARN
from tfyarn.protocol import skeinlink

HADOOP_HOME = Path(os.environ.get("HADOOP_HOME")
                   or Path.home() / ".cache" / "tfyarn" / "hadoop-3.3.6")


def missing(what: str) -> None:
    if os.environ.get("TFYARN_REQUIRE_HADOOP") == "1":
        pytest.fail(f"{what} is missing (scripts/yarn-sandbox start installs Hadoop; "
                    f"a JDK: apt-get install default-jdk-headless)")
    pytest.skip(f"{what} is missing (scripts/yarn-sandbox start installs Hadoop)")


@pytest.fixture(scope="module")
def hadoop_classpath() -> str:
    if not (HADOOP_HOME / "bin" / "hadoop").exists():
        missing(f"Hadoop ({HADOOP_HOME})")
    if shutil.which("javac") is None:
        missing("javac")
    return subprocess.run([str(HADOOP_HOME / "bin" / "hadoop"), "classpath", "--glob"],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def pypi_wheel() -> Path:
    """PyPI's skein 0.8.2 wheel, which build-skein keeps beside its builds (pinned by
    hash; the build takes its generated protobuf modules)."""
    built = subprocess.run([str(REPO / "scripts" / "build-skein")], capture_output=True,
                           text=True, check=True).stdout.strip()
    return Path(built).parent.parent / "skein-0.8.2-pypi" / "skein-0.8.2-py3-none-any.whl"


@pytest.fixture(scope="module")
def pypi_jar(pypi_wheel, tmp_path_factory) -> Path:
    """skein 0.8.2's own jar."""
    out = tmp_path_factory.mktemp("pypi") / "skein.jar"
    with zipfile.ZipFile(pypi_wheel) as z:
        out.write_bytes(z.read("skein/java/skein.jar"))
    return out


def java_check(name: str, jar: Path, classpath: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """tests/java/NAME.java compiled against `jar` and run with it and Hadoop's classpath."""
    classes = tmp_path / f"classes-{name}-{jar.parent.name}"
    classes.mkdir()
    cp = f"{jar}:{classpath}"
    subprocess.run(["javac", "-nowarn", "-d", str(classes), "-cp", cp,
                    str(REPO / "tests" / "java" / f"{name}.java")],
                   check=True, capture_output=True, text=True)
    return subprocess.run(["java", "-cp", f"{classes}:{cp}", f"com.anaconda.skein.{name}"],
                          capture_output=True, text=True, timeout=120)


def installed_jar() -> Path:
    import skein

    return Path(skein.__file__).parent / "java" / "skein.jar"


def test_a_watch_confirmation_and_a_matching_put_never_share_the_stream(
        hadoop_classpath, tmp_path):
    out = java_check("WatchRaceCheck", installed_jar(), hadoop_classpath, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "ok: the put waited for the watch's confirmation" in out.stdout


def test_on_skein_0_8_2s_own_jar_the_same_check_finds_the_race(
        hadoop_classpath, pypi_jar, tmp_path):
    out = java_check("WatchRaceCheck", pypi_jar, hadoop_classpath, tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr[-3000:]
    assert "OVERLAP: a put's event was sent during the watch's confirmation" in out.stdout


def test_the_am_starts_a_gangs_containers_at_once(hadoop_classpath, tmp_path):
    out = java_check("LaunchPoolCheck", installed_jar(), hadoop_classpath, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]


def test_on_skein_0_8_2s_own_jar_container_starts_run_one_at_a_time(
        hadoop_classpath, pypi_jar, tmp_path):
    out = java_check("LaunchPoolCheck", pypi_jar, hadoop_classpath, tmp_path)
    assert out.returncode == 1 and "SERIAL" in out.stdout, out.stdout + out.stderr[-3000:]


def test_the_am_keeps_a_node_that_did_not_start_a_container_out_until_it_is_back(
        hadoop_classpath, tmp_path):
    """skein patch 0009: the AM's blacklist asks, on an AM whose RM client records them."""
    out = java_check("KeepOutCheck", installed_jar(), hadoop_classpath, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("ok: +dead.example +other.example -dead.example"), out.stdout


def test_on_skein_0_8_2s_own_jar_no_node_is_ever_kept_out(hadoop_classpath, pypi_jar,
                                                          tmp_path):
    out = java_check("KeepOutCheck", pypi_jar, hadoop_classpath, tmp_path)
    assert out.returncode == 1 and out.stdout.startswith("NO KEEP-OUT"), out.stdout + out.stderr


def test_two_outstanding_container_requests_never_share_a_priority(hadoop_classpath,
                                                                     tmp_path):
    """skein patch 0013: the AM matches a given container to its request by priority
    alone; a shared one left a gang's third container asked for and never given."""
    out = java_check("PriorityCheck", installed_jar(), hadoop_classpath, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert out.stdout.startswith("ok: outstanding priorities"), out.stdout


def test_on_skein_0_8_2s_own_jar_a_new_request_takes_an_outstanding_priority(
        hadoop_classpath, pypi_jar, tmp_path):
    out = java_check("PriorityCheck", pypi_jar, hadoop_classpath, tmp_path)
    assert out.returncode == 1 and out.stdout.startswith("SHARED"), \
        out.stdout + out.stderr[-3000:]


def test_the_installed_skein_is_tfyarns_build_with_its_jar():
    skein = skeinlink.tfyarns_skein()
    assert skeinlink.TFYARNS_SKEIN in skein.__version__
    with zipfile.ZipFile(installed_jar()) as z:
        manifest = z.read("META-INF/MANIFEST.MF").decode()
    assert f"Implementation-Version: {skein.__version__}" in manifest


def test_an_applications_attempts_read_back_as_set():
    skein = skeinlink.tfyarns_skein()
    spec = skein.ApplicationSpec(master=skein.Master(script="true"), max_attempts=2)
    assert skein.ApplicationSpec.from_protobuf(spec.to_protobuf()).max_attempts == 2


def test_skein_imports_yaml_only_to_read_or_write_yaml(tmp_path):
    """Patch 0020: `import skein` (every client, driver and launcher) leaves PyYAML
    unloaded; a spec still goes to YAML and back, from a string and from a file."""
    code = ("import sys, skein\n"
            "assert 'yaml' not in sys.modules, 'import skein loaded yaml'\n"
            "spec = skein.ApplicationSpec(name='y', master=skein.Master(script='true'))\n"
            "back = skein.ApplicationSpec.from_yaml(spec.to_yaml())\n"
            "spec.to_file(sys.argv[1])\n"
            "print(back.name, skein.ApplicationSpec.from_file(sys.argv[1]).name)\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "spec.yaml")],
                         capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.split() == ["y", "y"], out.stderr


def test_pypis_skein_is_refused_on_the_gateway_saying_what_to_run(el_submit, pypi_wheel,
                                                                  tmp_path):
    """PyPI's 0.8.2 wheel unpacked first on the path (its own dist-info with it), as in
    a venv where `pip install -e .` fetched it: a submit to YARN is one Error line, exit
    EXIT_TFYARN, nothing submitted."""
    site = tmp_path / "pypi-site"
    with zipfile.ZipFile(pypi_wheel) as z:
        z.extractall(site)
    conf = tmp_path / "conf"
    conf.mkdir()
    out = el_submit("-t", "tensorflow-worker", "-wn", "1", "-c", "true",
                    env={"PYTHONPATH": str(site), "HADOOP_CONF_DIR": str(conf)})
    assert out.returncode == EXIT_TFYARN and out.stdout == "", out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: skein 0.8.2 is PyPI's build"), lines
    assert skeinlink.BUILD_SKEIN in lines[0]
