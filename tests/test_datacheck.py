"""`tfyarn check-data`: the pure line check, and the command on real files (the UCI
Adult files, byte-identical to what the seed tripped over), local and over WebHDFS
(a stand-in NameNode on 127.0.0.1; the real one is in integration/)."""

from __future__ import annotations

import subprocess
import sys

from conftest import DATA

from tfyarn.hdfs.datacheck import check_lines


def test_blank_lines_field_counts_and_headers():
    lines = ["age,workclass,hours\n", "39,State-gov,40\n", "50,Private,13\n", "\n",
             "38,Private\n", "53,Private,40\n", "28,Private,40\n"]
    found = [(f.line, f.kind) for f in check_lines(lines)]
    assert found == [(1, "header"), (4, "blank"), (5, "fields")]
    assert [f.kind for f in check_lines(lines, fields=2)].count("fields") == 5


def tfyarn(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tfyarn", *args], capture_output=True,
                          text=True, env=env)


def test_the_seeds_blank_line_is_caught():
    out = tfyarn("check-data", str(DATA / "adult.data"), str(DATA / "adult.test"),
                 "--fields", "15")
    assert out.returncode == 1
    assert f"{DATA / 'adult.data'}:32562: blank line" in out.stdout
    assert f"{DATA / 'adult.test'}:1: 1 fields, expected 15" in out.stdout


def test_clean_file_and_missing_file(tmp_path):
    good = tmp_path / "good.csv"
    good.write_text("1,2,3\n4,5,6\n")
    ok = tfyarn("check-data", str(good))
    assert ok.returncode == 0 and ok.stdout.strip() == f"{good}: clean"
    missing = tfyarn("check-data", str(tmp_path / "nope.csv"))
    assert missing.returncode == 2 and missing.stderr.startswith("Error: check-data: cannot read")


def test_hdfs_paths_are_read_over_webhdfs(webhdfs):
    root, conf = webhdfs.root, webhdfs.conf
    (root / "ml").mkdir()
    (root / "ml" / "adult.data").write_bytes((DATA / "adult.data").read_bytes())
    out = tfyarn("check-data", "hdfs://127.0.0.1:9000/ml/adult.data", "-conf", str(conf))
    assert out.returncode == 1, out.stderr
    assert "hdfs://127.0.0.1:9000/ml/adult.data:32562: blank line" in out.stdout
