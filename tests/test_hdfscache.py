"""The HDFS cache for env archives and big -f dirs: upload once, reuse, never corrupt,
against a stand-in WebHDFS (the real HDFS is in integration/)."""

from __future__ import annotations

import tarfile
import threading

from tfyarn.client import appspec, staging
from tfyarn.core.settings import Settings
from tfyarn.hdfs.cache import HdfsCache, sha256


def env_archive(tmp_path, content: bytes = b"#!/bin/sh\n"):
    src = tmp_path / "env"
    (src / "bin").mkdir(parents=True)
    (src / "bin" / "python").write_bytes(content)
    archive = tmp_path / "env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(src / "bin", arcname="bin")
    return archive


def test_uploaded_once_then_reused(webhdfs, tmp_path):
    archive = env_archive(tmp_path)
    cache = HdfsCache.open(str(webhdfs.conf), "alice")
    uri, hit = cache.put(str(archive))
    assert not hit and uri == f"hdfs:///user/alice/.tfyarn/cache/{sha256(str(archive))}.tar.gz"
    assert webhdfs.uploaded == [archive.stat().st_size]
    again, hit = cache.put(str(archive))
    assert hit and again == uri and webhdfs.uploaded == [archive.stat().st_size]  # 0 bytes
    stored = webhdfs.root / uri.removeprefix("hdfs:///")
    assert stored.read_bytes() == archive.read_bytes()
    assert not [p for p in stored.parent.iterdir() if p.name.endswith(".tmp")]


def test_concurrent_submits_of_one_archive(webhdfs, tmp_path):
    archive = env_archive(tmp_path, b"x" * 300_000)
    results = []

    def submit():
        results.append(HdfsCache.open(str(webhdfs.conf), "bob").put(str(archive))[0])

    threads = [threading.Thread(target=submit) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1 and len(results) == 4
    stored = webhdfs.root / results[0].removeprefix("hdfs:///")
    assert stored.read_bytes() == archive.read_bytes()
    assert not [p for p in stored.parent.iterdir() if p.name.endswith(".tmp")]


def test_use_cache_swaps_the_env_archive_and_says_cached(webhdfs, tmp_path, capsys):
    archive = env_archive(tmp_path)
    staged = appspec.Staged(str(tmp_path / "job.json"), env_archive=str(archive))
    settings = Settings(hadoop_conf_dir=str(webhdfs.conf), user="carol")
    first = staging.use_cache(staged, settings, None)
    assert first.env_archive.startswith("hdfs:///user/carol/.tfyarn/cache/")
    size_mb = archive.stat().st_size / 2**20
    assert f"uploaded {size_mb:.0f} MB to the HDFS cache" in capsys.readouterr().err
    second = staging.use_cache(staged, settings, None)
    assert second.env_archive == first.env_archive
    assert "-m_arg: cached on HDFS, nothing uploaded" in capsys.readouterr().err
    assert len(webhdfs.uploaded) == 1


def test_without_hadoop_conf_it_uploads_as_before(tmp_path, capsys):
    staged = appspec.Staged("job.json", env_archive=str(env_archive(tmp_path)))
    out = staging.use_cache(staged, Settings(), None)
    assert out == staged and "HDFS cache not usable here" in capsys.readouterr().err


def test_dir_archives_are_deterministic(tmp_path):
    src = tmp_path / "proj"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("A = 1\n")
    (src / "b.txt").write_text("b")
    entries = [(str(src / "pkg" / "a.py"), "pkg/a.py"), (str(src / "b.txt"), "b.txt")]
    staging._archive(entries, str(tmp_path / "one.tar.gz"), "-f proj")
    staging._archive(list(reversed(entries)), str(tmp_path / "two.tar.gz"), "-f proj")
    assert sha256(str(tmp_path / "one.tar.gz")) == sha256(str(tmp_path / "two.tar.gz"))
