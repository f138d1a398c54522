"""What users type and ship: bad values, `-c` semantics, `--env` bytes, `-f` symlinks,
failure messages and the small things (`--version`, local status/logs). Real CLI
subprocesses; every error is one `Error:` line, exit 2 (4 where tfyarn can't run),
no traceback, no job dir.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest
from conftest import py

from tfyarn.core.errors import EXIT_BAD_INPUT, EXIT_TFYARN

BIG = "9" * 400

BAD = [
    (["-t", ""], "-t: empty value"), (["-m", ""], "-m: empty value"),
    (["-a", ""], "-a: empty value"), (["-f", ""], "-f: empty entry"),
    (["-f", ",,"], "-f: empty entry"), (["--queue", ""], "--queue: empty value"),
    (["--timeout", ""], "--timeout: empty value"), (["-a", "two\nlines"], "-a:"),
    (["-m_arg", "env.tar.gz"], "-m_arg: has no use with -m local"),
    (["-wn", "٣"], "-wn: expected a whole number"), (["-wn", "100000"], "-wn: at most 1024"),
    (["-pn", "1000"], "-pn: at most 256"), (["--timeout", BIG], "--timeout: expected"),
    (["-wait_time", BIG], "-wait_time: expected"), (["-wm", BIG], "-wm: "),
    (["-wm", "5000t"], "-wm: at most 4 TB"), (["-wnn", "2"], "no such option: -wnn (did you "
                                               "mean -wn?)"),
    (["--heartbeat-timeout", "1"], "--heartbeat-timeout: must be at least 5"),
    # a value left out: click would take the next option as it (and name another flag)
    (["-interact", "--heartbeat-timeout", "5"],
     "-interact needs a value before --heartbeat-timeout: write -interact True (or False)"),
    (["-wn", "-wc", "1"], "-wn needs a value before -wc: write -wn N"),
]


@pytest.mark.parametrize(("args", "expected"), BAD, ids=[repr(a)[:40] for a, _ in BAD])
def test_bad_values_are_one_line(el_submit, args, expected):
    out = el_submit("-t", "standalone", *args, "--local", "-c", "true") if args[0] != "-t" \
        else el_submit(*args, "--local", "-c", "true")
    assert out.returncode == EXIT_BAD_INPUT, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and expected in lines[0], lines
    assert out.stdout == "" and list(el_submit.tmpdir.iterdir()) == []


@pytest.mark.parametrize("kind", ["loop", "dangling", "fifo"])
def test_unshippable_files_are_named(el_submit, tmp_path, kind):
    proj = tmp_path / "proj"
    (proj / "sub").mkdir(parents=True)
    (proj / "ok.py").write_text("x")
    bad = proj / "sub" / "bad"
    if kind == "loop":
        bad.symlink_to(proj)
    elif kind == "dangling":
        bad.symlink_to(tmp_path / "nowhere")
    else:
        os.mkfifo(bad)
    out = el_submit("-t", "standalone", "-f", "./", "--local", "-c", "true", cwd=proj)
    assert out.returncode == EXIT_BAD_INPUT, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0], lines
    assert {"loop": "symlink loop", "dangling": "dangling symlink", "fifo": "a FIFO"}[kind] \
        in lines[0]


@pytest.mark.parametrize("tmpdir", ["missing", "file", "sysfs"])
def test_unusable_tmpdir_is_one_line(el_submit, tmp_path, tmpdir):
    target = {"missing": tmp_path / "nope", "file": tmp_path / "afile", "sysfs": "/sys"}[tmpdir]
    if tmpdir == "file":
        target.write_text("x")
    out = el_submit("-t", "standalone", "--local", "-c", "true", env={"TMPDIR": str(target)})
    assert out.returncode == EXIT_TFYARN, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "TMPDIR" in lines[0] and "Traceback" not in out.stderr, lines


def test_disk_full_while_staging_is_one_line(el_submit, tmp_path):
    (tmp_path / "big.bin").write_bytes(b"x" * 200_000)
    cmd = (f"ulimit -f 64; exec {sys.executable} -m tfyarn.cli -t standalone -f big.bin "
           "--local -c true")  # files over 32 KB can't be written: EFBIG, as on a full disk
    out = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "TMPDIR": str(el_submit.tmpdir)})
    assert out.returncode == EXIT_TFYARN, out.stderr
    assert out.stderr.startswith("Error: cannot stage the job") and "Traceback" not in out.stderr
    assert list(el_submit.tmpdir.iterdir()) == []


def test_malformed_site_defaults_are_one_line(el_submit, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "yarn").write_text("#!/bin/sh\nexit 1\n")
    (fake / "yarn").chmod(0o755)
    conf = tmp_path / "tfyarn.yaml"
    conf.write_text("docker: [unclosed\n")
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "TFYARN_CONF": str(conf)}
    out = el_submit("-t", "standalone", "-c", "true", env=env)
    assert out.returncode == EXIT_BAD_INPUT and "Traceback" not in out.stderr, out.stderr
    assert out.stderr.startswith(f"Error: site defaults {conf}: cannot read them")


def test_options_after_c_are_warned_about(el_submit):
    out = el_submit("-t", "standalone", "--local", "-c", "echo", "--dry-run", "x")
    assert out.returncode == 0, out.stderr
    assert "warning: --dry-run after -c is passed to your command" in out.stderr
    assert "[worker:0] --dry-run x" in out.stderr


# ---------------------------------------------------------------- -c, one rule

C_TABLE = [
    (["echo hi", "--epochs", "3"], "hi --epochs 3"),
    (["echo $TFYARN_TASK_TYPE"], "worker"),
    (["echo", "$TFYARN_TASK_TYPE"], "worker"),
    (["echo a; echo b"], "a|b"),
    (["false || echo fallback && echo and"], "fallback|and"),
    (["echo", "'two  spaces'"], "two  spaces"),
    (["echo", '"$TFYARN_TASK_INDEX quoted"'], "0 quoted"),
    (["echo héllo 日本"], "héllo 日本"),
    ([py("import sys; print(len(sys.argv))"), "a", "b"], "3"),
]


@pytest.mark.parametrize(("words", "expected"), C_TABLE, ids=[" ".join(w) for w, _ in C_TABLE])
def test_c_is_one_shell_line(el_submit, words, expected):
    """The words after -c are joined by spaces and run by bash on the node: the same
    rule whatever the token count (YARN runs the very same launcher)."""
    out = el_submit("-t", "standalone", "--local", "-c", *words)
    assert out.returncode == 0, out.stderr
    got = [x.split("] ", 1)[1] for x in out.stderr.splitlines()
           if x.startswith("[worker:0] ") and "tfyarn:" not in x]
    assert "|".join(got) == expected


def test_env_values_arrive_byte_for_byte(el_submit):
    values = {"Q": 'say "hi"', "B": "`uname`", "S": "$(id) ${HOME}", "BS": "a\\b\\\\c",
              "U": "ünï 日本", "SP": "  lead and trail  ", "EQ": "a=b=c"}
    keys = sorted(values)
    probe = f"import json, os; print('ENV ' + json.dumps({{k: os.environ[k] for k in {keys!r}}}))"
    args = [a for k, v in values.items() for a in ("--env", f"{k}={v}")]
    out = el_submit("-t", "standalone", *args, "--local", "-c", py(probe))
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stderr.splitlines() if "ENV " in x)
    assert json.loads(line.split("ENV ", 1)[1]) == values


def test_f_follows_symlinks_and_shares_one_copy(el_submit, tmp_path):
    outside = tmp_path / "outside"
    (outside / "pkg").mkdir(parents=True)
    (outside / "pkg" / "mod.py").write_text("VALUE = 7\n")
    (outside / "data.txt").write_text("linked file")
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "pkg").symlink_to(outside / "pkg")
    (proj / "data.txt").symlink_to(outside / "data.txt")
    probe = ("import os, pkg.mod; st = os.stat('data.txt'); "
             "print('SEEN', pkg.mod.VALUE, open('data.txt').read(), st.st_ino, "
             "os.path.realpath('data.txt').startswith(str(os.environ['HOME'])))")
    out = el_submit("-t", "tensorflow-worker", "-wn", "3", "-f", "./", "--local",
                    "-c", py(probe), cwd=proj, env={"HOME": str(outside)})
    assert out.returncode == 0, out.stderr
    seen = [x.split("SEEN ", 1)[1].split() for x in out.stderr.splitlines() if "SEEN " in x]
    assert len(seen) == 3
    # every task reads one shared copy (same inode), a snapshot: not the linked original
    assert all(s == ["7", "linked", "file", seen[0][3], "False"] for s in seen)


# ---------------------------------------------------------------- failure messages


def final_error(stderr: str) -> str:
    """el_submit's closing error: from its `Error: ` line to the end."""
    return stderr[stderr.index("\nError: ") + 1:]


def test_failure_message_starts_at_the_traceback_and_is_bounded(el_submit):
    code = ("import sys\n"
            "for i in range(300): print('noise', i, file=sys.stderr)\n"
            "print('x' * 5_000_000, file=sys.stderr)\n"
            "def f0():\n    return 1 / 0\n"
            + "".join(f"def f{i}():\n    return f{i - 1}()\n" for i in range(1, 20))
            + "f19()\n")
    out = el_submit("-t", "standalone", "--local", "-c", py(code))
    assert out.returncode == 1
    error = final_error(out.stderr)
    assert len(error) < 10_000, len(error)
    assert "last stderr lines of worker:0:\n  Traceback (most recent call last):" in error
    assert "ZeroDivisionError: division by zero" in error
    assert "traceback lines]" in error  # the middle frames are skipped, saying so


def test_huge_line_is_cut_in_the_message(el_submit):
    out = el_submit("-t", "standalone", "--local", "-c",
                    py("import sys; print('y' * 3_000_000, file=sys.stderr); sys.exit(5)"))
    error = final_error(out.stderr)
    assert out.returncode == 1 and "worker:0 exited with code 5" in error
    assert "more characters]" in error and len(error) < 2_000


def test_a_shell_reported_signal_is_named(el_submit):
    out = el_submit("-t", "standalone", "--local", "-c", "bash -c 'kill -9 $$'; exit $?")
    assert out.returncode == 1
    assert "worker:0 was killed by SIGKILL (exit code 137)" in out.stderr


def test_last_line_without_newline_is_terminated(el_submit):
    out = el_submit("-t", "standalone", "--local", "-c", "printf 'no newline' >&2; exit 1")
    assert "[worker:0] no newline" in out.stderr.splitlines()
    log = out.stderr.split("full log: less ", 1)[1].strip()
    with open(log) as f:  # the task's own log (a container log on YARN)
        assert "no newline\ntfyarn: worker:0: exit code 1\n" in f.read()


# ---------------------------------------------------------------- small things


def test_version(el_submit):
    from tfyarn import __version__

    out = el_submit("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"tfyarn, version {__version__}"
    group = subprocess.run([sys.executable, "-m", "tfyarn", "--version"], capture_output=True,
                           text=True)
    assert group.returncode == 0 and __version__ in group.stdout


def test_success_line_has_elapsed_time_and_singular(el_submit):
    out = el_submit("-t", "standalone", "--local", "-c", "true")
    assert out.returncode == 0
    assert "1 task," in out.stderr and "all 1 task exited with code 0" in out.stderr
    assert " SUCCEEDED in " in out.stderr.splitlines()[-1]


def test_local_status_and_logs_of_a_kept_and_a_removed_job(el_submit):
    tfyarn = [sys.executable, "-m", "tfyarn"]
    env = {**os.environ, "TMPDIR": str(el_submit.tmpdir)}
    kept = el_submit("-t", "standalone", "--local", "-c", "echo kept-output",
                     env={"TFYARN_KEEP_JOB_DIR": "1"})
    job = kept.stdout.strip()
    assert "logs kept (TFYARN_KEEP_JOB_DIR): " in kept.stderr
    status = subprocess.run([*tfyarn, "status", job], capture_output=True, text=True, env=env)
    assert status.returncode == 0 and "final status: SUCCEEDED" in status.stdout
    logs = subprocess.run([*tfyarn, "logs", job, "--task", "worker:0"], capture_output=True,
                          text=True, env=env)
    assert logs.returncode == 0 and "kept-output" in logs.stdout
    removed = el_submit("-t", "standalone", "--local", "-c", "true").stdout.strip()
    gone = subprocess.run([*tfyarn, "status", removed], capture_output=True, text=True, env=env)
    assert gone.returncode == 1 and "its job dir is gone" in gone.stderr


def test_x_false_says_when_the_chief_is_done(el_submit):
    cmd = 'if [ "$TFYARN_TASK_TYPE" = ps ]; then sleep 2; fi; true'
    out = el_submit("-t", "tensorflow-ps", "-x", "False", "--local", "-c", cmd)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("chief:0 finished; -x False: the job now waits") == 1


def test_conf_on_lifecycle_commands(tmp_path):
    out = subprocess.run([sys.executable, "-m", "tfyarn", "status", "application_1_1", "-conf",
                          str(tmp_path / "nope")], capture_output=True, text=True)
    assert out.returncode == EXIT_BAD_INPUT and "-conf:" in out.stderr


def test_readme_setup_commands_chain_in_one_shell():
    """The README's two set-up commands, pasted one after the other, run from the repo
    root: the first must not leave the shell in examples/census."""
    from conftest import REPO

    text = (REPO / "README.md").read_text()
    first, second = [line.strip() for line in text.split("## Set up", 1)[1].splitlines()
                     if line.startswith("    ") and line.strip()][:2]
    assert "cd examples/census" not in first.replace("(cd examples/census", "")
    assert second.startswith("scripts/test-tools && python3 -m venv .venv")
    assert ".venv/bin/pytest" in second and "scripts/build-horovod" in second
    assert '"$(scripts/build-skein)"' in first and '"$(scripts/build-skein)"' in second
    ci = (REPO / ".ci" / "run").read_text()  # CI runs the README's line itself (#42)
    assert "README.md" in ci and 'eval "$command"' in ci
    shlex.split(first)  # it is a well-formed shell line


def test_f_from_hdfs_is_fetched_locally(el_submit, webhdfs):
    root, conf = webhdfs.root, webhdfs.conf
    (root / "ml" / "code").mkdir(parents=True)
    (root / "ml" / "code" / "train.py").write_text("print('FROM HDFS', open('cfg.txt').read())\n")
    (root / "ml" / "code" / "cfg.txt").write_text("lr=0.1")
    out = el_submit("-t", "tensorflow-worker", "-wn", "2", "-f", "hdfs://127.0.0.1:9000/ml/code",
                    "--local", "-c", "cd code && python train.py",
                    env={"HADOOP_CONF_DIR": str(conf)})
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("FROM HDFS lr=0.1") == 2


def test_f_from_an_unreachable_hdfs_is_one_line(el_submit, tmp_path):
    out = el_submit("-t", "standalone", "-f", "hdfs://127.0.0.1:1/ml/code", "--local", "-c",
                    "true", env={"HADOOP_CONF_DIR": str(tmp_path)})
    assert out.returncode == EXIT_TFYARN, out.stderr
    lines = out.stderr.strip().splitlines()
    assert lines[-1].startswith("Error: -f: cannot fetch hdfs://127.0.0.1:1/ml/code over WebHDFS")
    assert list(el_submit.tmpdir.iterdir()) == []  # the half-made job dir is gone


def test_the_hadoop_user_follows_hadoops_rule():
    """HADOOP_USER_NAME, else the uid's login name; never a stale or missing USER (cron,
    Oozie, systemd); in a YARN container the application's user (the NodeManager's USER)."""
    import pwd

    from tfyarn.core.settings import hadoop_user

    me = pwd.getpwuid(os.getuid()).pw_name
    assert hadoop_user({}) == me
    assert hadoop_user({"USER": "someone-else"}) == me
    assert hadoop_user({"HADOOP_USER_NAME": "etl", "USER": "x"}) == "etl"
    assert hadoop_user({"CONTAINER_ID": "container_1_0001_01_000002", "USER": "alice"}) == "alice"


def test_status_of_a_finished_12_worker_local_job_is_in_natural_order(el_submit):
    """The finished job's table (`tfyarn status` reads the outcome record) lists ps,
    chief, worker:0 ... worker:11 by number, as the running job's does."""
    env = {**os.environ, "TMPDIR": str(el_submit.tmpdir)}
    done = el_submit("-t", "tensorflow-ps", "-x", "False", "-wn", "13", "--local", "-c", "true",
                     env={"TFYARN_KEEP_JOB_DIR": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr
    status = subprocess.run([sys.executable, "-m", "tfyarn", "status", done.stdout.strip(),
                             "--tasks"], capture_output=True, text=True, env=env, timeout=60)
    assert status.returncode == 0, status.stderr
    table = status.stdout.split("tasks:\n", 1)[1].splitlines()
    assert [line.split()[0] for line in table] == [
        "ps:0", "chief:0", *(f"worker:{i}" for i in range(12))]
