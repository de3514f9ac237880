"""Build the sandbox image without a registry: import this Debian host's files for the packages
the Dockerfile installs, plus a precompiled header and the runner (docs/sandbox.md).

The image carries the label IMAGE_LABEL = hash(Dockerfile, runner.py, this file); it is rebuilt only when
missing or when that hash changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import os
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path

from . import runner
from .languages import PYTHON, pch_build_argv

HERE = Path(__file__).parent
DOCKERFILE = HERE / "docker" / "Dockerfile"
RUNNER = HERE / "runner.py"
IMAGE = "xrpo-sandbox:latest"
IMAGE_LABEL = "xrpo.sandbox.hash"
RUNNER_DIR = "/opt/xrpo"  # runner.py and its bytecode (runner.runner_command)
_TOP_LINKS = ("bin", "lib", "lib64", "sbin")  # merged-/usr symlinks
_SKIP = ("/usr/share/doc", "/usr/share/man", "/usr/share/info", "/usr/share/locale", "/usr/share/lintian")


def image_hash() -> str:
    """Of everything that decides the image's content, this builder included."""
    h = hashlib.sha256(b"\0".join(f.read_bytes() for f in (DOCKERFILE, RUNNER, Path(__file__))))
    return h.hexdigest()[:16]


def dockerfile_packages() -> list[str]:
    """The packages named on the Dockerfile's `# xrpo-packages:` line."""
    m = re.search(r"^# xrpo-packages:(.*)$", DOCKERFILE.read_text(), re.M)
    if not m:
        raise ValueError(f"{DOCKERFILE} has no '# xrpo-packages:' line")
    return m.group(1).split()


def package_closure(roots: list[str]) -> list[str]:
    """Installed packages reachable from roots through Depends/Pre-Depends (first installed alternative)."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\n"], capture_output=True, text=True, check=True)
    installed = set(out.stdout.split())
    missing = [p for p in roots if p not in installed]
    if missing:
        raise RuntimeError(f"build-image imports host packages, but these are not installed: {missing}")
    seen, todo = set(), list(roots)
    while todo:
        pkg = todo.pop()
        if pkg in seen:
            continue
        seen.add(pkg)
        deps = subprocess.run(
            ["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", pkg], capture_output=True, text=True
        ).stdout
        for group in filter(None, (g.strip() for g in deps.split(","))):
            names = [re.sub(r"[ (:].*", "", alt.strip()) for alt in group.split("|")]
            todo += [n for n in names[:] if n in installed][:1]
    return sorted(seen)


def _host_paths(packages: list[str]) -> list[str]:
    listed = subprocess.run(["dpkg-query", "-L", *packages], capture_output=True, text=True).stdout.split("\n")
    paths = set()
    for p in listed:
        if not p.startswith("/") or p.startswith(_SKIP):
            continue
        # Store every entry under its real directory, so /lib/x/y lands in /usr/lib/x/y once.
        real = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
        if os.path.islink(real) or os.path.isfile(real):
            paths.add(real)
            # Debian compiles .pyc at install time, so dpkg does not list them; without them every
            # Python start in the read-only image compiles its imports again.
            if real.endswith(".py") and os.path.isfile(pyc := importlib.util.cache_from_source(real)):
                paths.add(pyc)
    for link in Path("/etc/alternatives").iterdir():  # e.g. cc, c++, which
        paths.add(str(link))
    paths.add("/etc/ld.so.cache")
    return sorted(paths)


def build_rootfs_tar(out: io.BufferedIOBase, pch_file: str) -> int:
    """Write the image's root filesystem as a tar stream; returns the number of host files."""
    paths = _host_paths(package_closure(dockerfile_packages()))
    with tarfile.open(fileobj=out, mode="w|") as tar:
        for name in _TOP_LINKS:
            if os.path.islink(f"/{name}"):
                info = tarfile.TarInfo(name)
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(f"/{name}")
                tar.addfile(info)
        for d, mode in (
            ("tmp", 0o1777),
            ("work", 0o755),
            ("job", 0o755),
            ("proc", 0o755),
            ("dev", 0o755),
            ("sys", 0o755),
            ("pch", 0o755),
            ("pch/bits", 0o755),
            ("opt/xrpo", 0o755),
        ):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
        for p in paths:
            if os.path.lexists(p) and p.lstrip("/") not in _TOP_LINKS:
                tar.add(p, arcname=p.lstrip("/"), recursive=False)
        tar.add(pch_file, arcname="pch/bits/stdc++.h.gch")
        with tempfile.TemporaryDirectory(prefix="xrpo-runner-") as compiled:
            runner.compile_runner(PYTHON, compiled)  # the image's python3 is this host's
            for name in sorted(os.listdir(compiled)):
                tar.add(os.path.join(compiled, name), arcname=f"{RUNNER_DIR.lstrip('/')}/{name}")
    return len(paths)


def find_image(client) -> object | None:
    """The image if it exists with the current hash label, else None."""
    import docker

    try:
        img = client.images.get(IMAGE)
    except docker.errors.ImageNotFound:
        return None
    return img if img.labels.get(IMAGE_LABEL) == image_hash() else None


def build_image(client, force: bool = False) -> str:
    """Import the image from this host's packages (no registry); returns the image id."""
    if not force and (img := find_image(client)) is not None:
        return img.id
    import docker

    try:
        stale = client.images.get(IMAGE)  # an older build, untagged below; removed once replaced
    except docker.errors.ImageNotFound:
        stale = None
    with tempfile.TemporaryDirectory(prefix="xrpo-image-") as tmp:
        pch = os.path.join(tmp, "bits", "stdc++.h.gch")
        r = subprocess.run(pch_build_argv(pch), capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"building the precompiled header failed: {r.stderr[-500:]}")
        tar_path = os.path.join(tmp, "rootfs.tar")
        with open(tar_path, "wb") as f:
            build_rootfs_tar(f, pch)
        changes = [f"LABEL {IMAGE_LABEL}={image_hash()}", "WORKDIR /work", "ENV PATH=/usr/local/bin:/usr/bin:/bin"]
        with open(tar_path, "rb") as f:
            client.api.import_image_from_data(
                f, repository=IMAGE.split(":")[0], tag=IMAGE.split(":")[1], changes=changes
            )
    img = find_image(client)
    if img is None:
        raise RuntimeError(f"docker import did not produce {IMAGE} with label {IMAGE_LABEL}={image_hash()}")
    if stale is not None and stale.id != img.id:
        with contextlib.suppress(docker.errors.APIError):  # still used by a container: leave it
            client.images.remove(stale.id)
    return img.id
