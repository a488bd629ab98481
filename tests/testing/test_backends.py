"""How `kafka_cluster` chooses its backend (no server is started here)."""

from __future__ import annotations

import pytest

import keyshared.testing as testing
from keyshared.dev import BOOTSTRAP_ENV, ZOOKEEPER_ENV


@pytest.fixture(autouse=True)
def _no_external(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (BOOTSTRAP_ENV, ZOOKEEPER_ENV, testing.BACKEND_ENV):
        monkeypatch.delenv(name, raising=False)


def test_auto_uses_the_external_cluster_when_both_variables_are_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(BOOTSTRAP_ENV, "127.0.0.1:1")
    monkeypatch.setenv(ZOOKEEPER_ENV, "127.0.0.1:2")
    with testing.kafka_cluster() as cluster:
        assert (cluster.backend, cluster.bootstrap_servers) == ("external", "127.0.0.1:1")
        assert cluster.env() == {BOOTSTRAP_ENV: "127.0.0.1:1", ZOOKEEPER_ENV: "127.0.0.1:2"}


def test_auto_falls_back_to_a_local_cluster_without_an_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(testing, "docker_client", lambda: None)
    assert testing._resolve("auto") == "local"


def test_auto_falls_back_to_a_local_cluster_when_the_image_is_missing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class NoImages:
        class images:
            @staticmethod
            def get(tag: str) -> None:
                raise LookupError(tag)

        def close(self) -> None:
            pass

    monkeypatch.setattr(testing, "docker_client", NoImages)
    assert testing._resolve("auto") == "local"
    assert "keyshared dev image" in caplog.text


def test_external_without_its_variables_and_unknown_backends_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with pytest.raises(ValueError, match=BOOTSTRAP_ENV):
        testing._resolve("external")
    monkeypatch.setenv(testing.BACKEND_ENV, "kubernetes")
    with pytest.raises(ValueError, match="kubernetes"):
        testing._backend_from_env()
