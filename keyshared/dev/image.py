"""The container image of the test servers, built here from nothing, as an air-gapped user would.

Why not a public image: `confluentinc/cp-kafka` and `zookeeper` need a registry, and a machine
that cannot pull (CI behind a closed network, an air-gapped site) still has a Debian mirror and
the jars cache. So the image is made of what `keyshared dev` already trusts:

1. a root file system from ``debootstrap --variant=minbase`` of this machine's Debian release,
   with a headless JRE included (about 40 s), trimmed of apt lists, .debs, docs and locales,
   packed as a tarball cached under ``~/.cache/keyshared/images`` (reused by every later build);
2. ``docker import`` of that tarball: the base image ``keyshared/debian-jre``;
3. a one-step build on it that copies the pinned Kafka and ZooKeeper jars (the `keyshared dev
   fetch` cache) to :data:`JARS_IN_IMAGE`. The tag names the Kafka version and the pom's hash,
   so an edited pom gets a new image and never runs old jars.

The image has no entry point and no config: `keyshared.testing.containers` writes both servers'
configs into the containers it starts, from the same settings as `LocalCluster`.

Example::

    client = docker.from_env()
    build = ensure_image(client)        # seconds when the tag exists, ~1 min from nothing
    print(build.tag, build.seconds)
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from keyshared.dev.errors import ImageBuildError
from keyshared.dev.jars import fetch_jars, jars_dir_for_pom
from keyshared.dev.runtime import user_cache_dir

__all__ = [
    "IMAGE_CACHE_ENV",
    "IMAGE_ENV",
    "JARS_IN_IMAGE",
    "JRE_PACKAGE",
    "MIRROR_ENV",
    "ImageBuild",
    "base_tag",
    "build_rootfs",
    "debian_release",
    "default_image_cache",
    "ensure_image",
    "image_tag",
    "rootfs_tarball",
]

log = logging.getLogger(__name__)

IMAGE_ENV = "KEYSHARED_KAFKA_IMAGE"
IMAGE_CACHE_ENV = "KEYSHARED_IMAGE_CACHE"
MIRROR_ENV = "KEYSHARED_DEBIAN_MIRROR"
JRE_PACKAGE = "openjdk-17-jre-headless"
JARS_IN_IMAGE = PurePosixPath("/opt/keyshared/jars")
_DEFAULT_MIRROR = "http://deb.debian.org/debian"
_REPOSITORY = "keyshared/kafka-zookeeper"
_BASE_REPOSITORY = "keyshared/debian-jre"
# What a server container never reads: ~190 MB of the 480 MB debootstrap leaves behind.
_TRIMMED = (
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/locale",
    "usr/share/info",
)
# A cold debootstrap downloads ~90 MB of .debs; a slow mirror should finish, a hung one not.
_DEBOOTSTRAP_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class ImageBuild:
    """What `ensure_image` did: the tag to run, whether it built anything, and how long it took."""

    tag: str
    built: bool
    seconds: float
    rootfs: Path | None = None


def default_image_cache() -> Path:
    """`$KEYSHARED_IMAGE_CACHE`, else `~/.cache/keyshared/images` (next to the jars)."""
    return user_cache_dir(IMAGE_CACHE_ENV, "images")


def debian_release(os_release: Path = Path("/etc/os-release")) -> str:
    """This machine's Debian codename (`bookworm`): the image runs the JRE the host tests with.

    :raises ImageBuildError: not a Debian-like system (debootstrap needs a codename).
    """
    try:
        text = os_release.read_text()
    except OSError as exc:
        raise ImageBuildError(f"cannot read {os_release}: {exc}") from exc
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key == "VERSION_CODENAME" and value.strip('"'):
            return value.strip('"')
    raise ImageBuildError(f"{os_release} names no VERSION_CODENAME; debootstrap needs one")


def image_tag() -> str:
    """`$KEYSHARED_KAFKA_IMAGE`, else `keyshared/kafka-zookeeper:<kafka>-<pom hash>`."""
    override = os.environ.get(IMAGE_ENV)
    if override:
        return override
    version = jars_dir_for_pom().name.removeprefix("kafka-")
    return f"{_REPOSITORY}:{version}"


def base_tag(release: str) -> str:
    """The imported root file system's tag: Debian release plus JRE package."""
    return f"{_BASE_REPOSITORY}:{release}-{JRE_PACKAGE}"


def rootfs_tarball(release: str, cache_root: Path | None = None) -> Path:
    """Where the root file system tarball of `release` is cached (whether or not it exists)."""
    root = cache_root if cache_root is not None else default_image_cache()
    return root / f"debian-{release}-minbase-{JRE_PACKAGE}.tar"


def build_rootfs(tarball: Path, release: str, mirror: str | None = None) -> Path:
    """Debootstrap a minbase root with the JRE into a tarball; atomic (a temp file, renamed).

    Needs root (debootstrap chroots and sets owners) and a Debian mirror.

    :raises ImageBuildError: debootstrap is missing or failed (its output is in the message).
    """
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ImageBuildError("debootstrap is not installed: `apt-get install debootstrap`")
    if os.geteuid() != 0:
        raise ImageBuildError("building the root file system needs root (debootstrap chroots)")
    mirror = mirror or os.environ.get(MIRROR_ENV) or _DEFAULT_MIRROR
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tarball.parent, prefix=".rootfs-") as work:
        root = Path(work) / "root"
        command = [
            debootstrap, "--variant=minbase", f"--include={JRE_PACKAGE}",
            release, str(root), mirror,
        ]  # fmt: skip
        log.info("debootstrap %s with %s from %s", release, JRE_PACKAGE, mirror)
        _run(command, "debootstrap", _DEBOOTSTRAP_TIMEOUT_S)
        for relative in _TRIMMED:
            target = root / relative
            if target.is_dir():
                shutil.rmtree(target)
                target.mkdir()
        partial = Path(work) / "rootfs.tar"
        _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], "tar", 300)
        partial.replace(tarball)
    return tarball


def ensure_image(
    client: Any,
    *,
    tag: str | None = None,
    cache_root: Path | None = None,
    mirror: str | None = None,
    rebuild: bool = False,
) -> ImageBuild:
    """Return the servers' image tag, building what is missing (rootfs, base, jars layer).

    :param client: a `docker.DockerClient` connected to the engine that will run the image.
    :param tag: default :func:`image_tag`.
    :param cache_root: where the rootfs tarball is cached; default :func:`default_image_cache`.
    :param rebuild: rebuild the image (not the cached tarball) even if the tag exists.
    :raises ImageBuildError: debootstrap, the import or the build failed.
    """
    import docker.errors

    started = time.monotonic()
    tag = tag or image_tag()
    if not rebuild and _has_image(client, tag):
        return ImageBuild(tag, built=False, seconds=time.monotonic() - started)
    release = debian_release()
    tarball = rootfs_tarball(release, cache_root)
    if not tarball.is_file():
        build_rootfs(tarball, release, mirror)
    base = base_tag(release)
    try:
        if rebuild or not _has_image(client, base):
            repository, _, version = base.partition(":")
            log.info("docker import %s as %s", tarball, base)
            client.api.import_image_from_file(str(tarball), repository=repository, tag=version)
        context = _build_context(base, fetch_jars())
        # Host networking: the engine may run without its default bridge (`--bridge=none`).
        client.images.build(
            fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
            network_mode="host", labels={"org.keyshared.image": "kafka-zookeeper"},
        )  # fmt: skip
    except docker.errors.DockerException as exc:
        raise ImageBuildError(f"building image {tag} from {tarball} failed: {exc}") from exc
    return ImageBuild(tag, built=True, seconds=time.monotonic() - started, rootfs=tarball)


def _has_image(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def _build_context(base: str, jars_dir: Path) -> io.BytesIO:
    """A tar build context: a Dockerfile on `base` and the jars (about 50 MB, in memory)."""
    dockerfile = (
        f"FROM {base}\nCOPY jars/ {JARS_IN_IMAGE}/\nENV KEYSHARED_JARS={JARS_IN_IMAGE}\n"
    ).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        archive.addfile(info, io.BytesIO(dockerfile))
        for jar in sorted(jars_dir.glob("*.jar")):
            archive.add(jar, arcname=f"jars/{jar.name}")
    buffer.seek(0)
    return buffer


def _run(command: list[str], what: str, timeout: float) -> None:
    """Run a build step; a failure quotes the end of its output."""
    try:
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise ImageBuildError(f"{what} did not finish within {timeout:.0f} s") from exc
    if result.returncode != 0:
        output = (result.stdout + result.stderr).strip()[-2000:]
        raise ImageBuildError(f"{what} failed (exit {result.returncode}):\n{output}")
