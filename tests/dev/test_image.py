"""The image recipe's pure parts: tag, cache path, release, and the build context."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from keyshared.dev import image
from keyshared.dev.errors import ImageBuildError
from keyshared.dev.jars import jars_dir_for_pom, pinned_versions


def test_the_tag_names_the_kafka_version_and_the_pom_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(image.IMAGE_ENV, raising=False)
    tag = image.image_tag()
    assert tag.startswith(f"keyshared/kafka-zookeeper:{pinned_versions().kafka}-")
    assert tag.endswith(jars_dir_for_pom().name.rsplit("-", 1)[1])
    monkeypatch.setenv(image.IMAGE_ENV, "mine:1")
    assert image.image_tag() == "mine:1"


def test_the_rootfs_is_cached_per_release_under_the_image_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(image.IMAGE_CACHE_ENV, str(tmp_path))
    tarball = image.rootfs_tarball("bookworm")
    assert tarball.parent == tmp_path
    assert "bookworm" in tarball.name and image.JRE_PACKAGE in tarball.name


def test_the_release_is_the_codename_of_os_release(tmp_path: Path) -> None:
    os_release = tmp_path / "os-release"
    os_release.write_text('PRETTY_NAME="Debian GNU/Linux 12"\nVERSION_CODENAME=bookworm\n')
    assert image.debian_release(os_release) == "bookworm"
    os_release.write_text('NAME="Something"\n')
    with pytest.raises(ImageBuildError, match="VERSION_CODENAME"):
        image.debian_release(os_release)


def test_the_build_context_copies_every_jar_onto_the_base(tmp_path: Path) -> None:
    for name in ("kafka_2.13-4.2.0.jar", "zookeeper-3.9.4.jar"):
        (tmp_path / name).write_bytes(b"jar")
    (tmp_path / ".complete").write_text("")
    context = image._build_context("keyshared/debian-jre:bookworm", tmp_path)
    with tarfile.open(fileobj=context) as archive:
        names = sorted(archive.getnames())
        dockerfile = archive.extractfile("Dockerfile")
        assert dockerfile is not None
        text = dockerfile.read().decode()
    assert names == ["Dockerfile", "jars/kafka_2.13-4.2.0.jar", "jars/zookeeper-3.9.4.jar"]
    assert text.startswith("FROM keyshared/debian-jre:bookworm\n")
    assert f"COPY jars/ {image.JARS_IN_IMAGE}/" in text


def test_building_the_rootfs_without_debootstrap_names_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(image.shutil, "which", lambda _: None)
    with pytest.raises(ImageBuildError, match="apt-get install debootstrap"):
        image.build_rootfs(tmp_path / "rootfs.tar", "bookworm")
