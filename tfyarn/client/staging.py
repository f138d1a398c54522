"""The YARN client's staging: the job JSON, `-f` dirs packed as archives, the HDFS cache,
and the site defaults; local I/O only, before anything is submitted.

Must not submit anything: it prepares what skein uploads.
"""

from __future__ import annotations

import dataclasses
import gzip
import os
import tarfile
from typing import TYPE_CHECKING, Any

from tfyarn.client import appspec
from tfyarn.client import files as filesmod
from tfyarn.core.errors import SpecError
from tfyarn.core.jobspec import ACL_ENTRY, JobSpec
from tfyarn.core.progress import Progress
from tfyarn.core.say import say
from tfyarn.core.settings import Settings
from tfyarn.hdfs import siteconf
from tfyarn.runtime import docker as dockerrun
from tfyarn.runtime import keytab as krb

if TYPE_CHECKING:
    from tfyarn.hdfs.spnego import Negotiator


def _archive(entries: list[tuple[str, str]], dest: str, what: str) -> None:
    """A dir's files as a .tar.gz: links already followed by the walk, stored as files.
    Deterministic (sorted, no gzip timestamp), so an unchanged dir hashes the same and
    the HDFS cache finds it."""
    sizes = {src: os.path.getsize(src) for src, _ in entries if os.path.isfile(src)}
    progress = Progress(f"packing {what}", sum(sizes.values()))
    with open(dest, "wb") as raw, gzip.GzipFile("", "wb", fileobj=raw, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w", dereference=True) as tar:
        for src, rel in sorted(entries, key=lambda e: e[1]):
            tar.add(src, arcname=rel, recursive=False)
            progress.add(sizes.get(src, 0))
    progress.finish()


def stage(spec: JobSpec, tmp: str) -> appspec.Staged:
    """Write the job JSON and pack each `-f` directory as an archive YARN will unpack."""
    filesmod.inventory(spec.files, spec.yarn.max_upload_mb, skip=[tmp])
    job_json = os.path.join(tmp, appspec.JOB_FILE)
    with open(job_json, "w", encoding="utf-8") as f:
        f.write(spec.to_json())
    resources, contents = [], []
    for i, f in enumerate(spec.files):
        if f.remote:  # YARN localizes it from HDFS itself: nothing through the client
            resources.append((f.dest, f.source, "file"))
            continue
        if not f.is_dir:
            resources.append((f.dest, os.path.realpath(f.source), "file"))
            continue
        name = f.dest or f".tfyarn-files-{i}"
        archive = os.path.join(tmp, f"files-{i}.tar.gz")
        _archive([(os.path.join(f.source, rel), rel)
                  for rel, _ in filesmod.walk(f.source, [tmp])], archive, f"-f {f.source}")
        resources.append((name, archive, "archive"))
        if not f.dest:
            contents.append(name)
    env = spec.runtime.arg if spec.runtime.mode == "virtual-env" else None
    return appspec.Staged(job_json, tuple(resources), tuple(contents), env)


def keytab_job(spec: JobSpec, principal: str | None, keytab: str | None) -> JobSpec:
    """A --principal/--keytab job: its tasks log in themselves from the keytab (shipped by
    `with_keytab`), so HDFS outlives its delegation tokens' max lifetime."""
    if not (principal and keytab):
        return spec
    return dataclasses.replace(spec, env=(*spec.env, (krb.PRINCIPAL_VAR, principal)))


def with_keytab(staged: appspec.Staged, keytab: str | None) -> appspec.Staged:
    """The keytab among the files YARN localizes (private to the application, in the
    submitter's staging dir): every container's launcher logs its tasks in with it."""
    if not keytab:
        return staged
    entry = (krb.KEYTAB_FILE, os.path.abspath(keytab), "file")
    return dataclasses.replace(staged, resources=(*staged.resources, entry))


def use_cache(staged: appspec.Staged, settings: Settings, conf_dir: str | None,
              login: Negotiator | None = None) -> appspec.Staged:
    """Swap the env archive and big -f archives for their copies in the HDFS cache,
    uploading each once (under Kerberos as `login`, over WebHDFS with SPNEGO); where the
    cache cannot serve, skein uploads them as before."""
    from tfyarn.hdfs.cache import MIN_DIR_BYTES, HdfsCache
    from tfyarn.hdfs.webhdfs import HdfsUnavailable

    big = [r for r in staged.resources
           if r[2] == "archive" and os.path.getsize(r[1]) >= MIN_DIR_BYTES]
    env = staged.env_archive if staged.env_archive and "://" not in staged.env_archive else None
    if env is None and not big:
        return staged
    try:
        cache = HdfsCache.open(settings.conf_dir(conf_dir), settings.user, login)
        if cache is None:
            say("HDFS cache not usable here (no HADOOP_CONF_DIR, or fs.defaultFS is not "
                "hdfs://): uploading")
            return staged
        if env is not None:
            env = _cached(cache, env, "-m_arg")
        swapped = {r[1]: _cached(cache, r[1], f"-f {r[0]}") for r in big}
    except (HdfsUnavailable, OSError) as exc:  # WebHDFS down, permissions: the submit goes on
        say(f"HDFS cache failed ({exc}); uploading instead")
        return staged
    resources = tuple((n, swapped.get(src, src), kind) for n, src, kind in staged.resources)
    return dataclasses.replace(staged, resources=resources,
                               env_archive=env or staged.env_archive)


def _cached(cache: Any, local: str, what: str) -> str:
    uri, hit = cache.put(local)
    size = os.path.getsize(local) / 2**20
    say(f"{what}: cached on HDFS, nothing uploaded ({uri})" if hit
        else f"{what}: uploaded {size:.0f} MB to the HDFS cache ({uri}); later submits reuse it")
    return uri


def load_defaults(settings: Settings, conf_dir: str | None = None) -> appspec.ClusterDefaults:
    """Site defaults from TFYARN_CONF, ~/.config/tfyarn/tfyarn.yaml or /etc/tfyarn/tfyarn.yaml,
    with `docker: runtime: auto` resolved from the cluster's yarn-site.xml in `conf_dir`."""
    found = next((p for p in settings.conf_files() if os.path.isfile(p)), None)
    defaults = _parse_defaults(found) if found else appspec.ClusterDefaults()
    if defaults.docker_runtime != "auto":
        return defaults
    site = siteconf.read_site(os.path.join(conf_dir, "yarn-site.xml")) if conf_dir else {}
    return dataclasses.replace(defaults, docker_runtime=dockerrun.runtime_for(site))


def _parse_defaults(path: str) -> appspec.ClusterDefaults:
    import yaml

    fix = f"fix {path} (see conf/tfyarn.yaml in tfyarn for the format) or point TFYARN_CONF " \
          "elsewhere"
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SpecError(f"site defaults {path}: cannot read them ({exc}); {fix}") from None
    docker, env, history = (data.get("docker") or {}, data.get("env") or {},
                            data.get("history") or {}) if isinstance(data, dict) \
        else (None, None, None)
    redact = data.get("redact") or [] if isinstance(data, dict) else []
    acls = data.get("acls") or {} if isinstance(data, dict) else {}
    if not isinstance(acls, dict):
        raise SpecError(f"site defaults {path}: `acls:` is a mapping (view:, modify:); {fix}")
    if not isinstance(redact, list):
        raise SpecError(f"site defaults {path}: `redact:` is a list of name patterns; {fix}")
    if not isinstance(docker, dict) or not isinstance(env, dict) \
            or not isinstance(history, dict) or not isinstance(docker.get("mounts") or [], list):
        raise SpecError(f"site defaults {path}: expected a mapping with `docker:` (network, "
                        f"mounts list, runtime), `env:` and `history:` (dir) mappings; {fix}")
    runtime = str(docker.get("runtime", "auto"))
    if runtime not in dockerrun.RUNTIMES:
        raise SpecError(f"site defaults {path}: docker: runtime: {runtime!r} is not one of "
                        f"{', '.join(dockerrun.RUNTIMES)}; {fix}")
    return appspec.ClusterDefaults(
        docker_network=str(docker.get("network", "host")),
        docker_mounts=tuple(str(m) for m in docker.get("mounts") or ()),
        docker_runtime=runtime,
        extra_env={str(k): str(v) for k, v in env.items()},
        history_dir=str(history["dir"]) if history.get("dir") else None,
        redact=tuple(str(n) for n in redact),
        view_acls=_acl_list(acls.get("view"), f"site defaults {path}: acls: view", fix),
        modify_acls=_acl_list(acls.get("modify"), f"site defaults {path}: acls: modify", fix))


def _acl_list(value: Any, where: str, fix: str) -> tuple[str, ...]:
    """`acls: view:` / `modify:`: a list of users, group:NAME or *, or one such string
    with commas; checked as --view-acls is."""
    if value is None:
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise SpecError(f"{where}: a list of names (users, group:NAME, *); {fix}")
    out = tuple(dict.fromkeys(i.strip() for i in items))
    bad = [e for e in out if not ACL_ENTRY.fullmatch(e)]
    if bad:
        raise SpecError(f"{where}: {bad[0]!r} is not a user name, group:NAME or *; {fix}")
    return out


# ---------------------------------------------------------------- skein client


def local_bytes(staged: appspec.Staged) -> int:
    """What skein uploads at submit: the staged files that are still local (once each)."""
    paths = {staged.job_json, staged.env_archive or "", *(r[1] for r in staged.resources)}
    return sum(os.path.getsize(p) for p in paths if "://" not in p and os.path.isfile(p))
