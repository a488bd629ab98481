"""`keyshared assign`: pins set and released through the CLI land in ZooKeeper."""

from __future__ import annotations

from click.testing import CliRunner

from coordinator.layout import GroupLayout
from coordinator.pins import Pins
from keyshared.cli import cli
from keyshared.core.slots import SlotRange
from tests.coordinator.conftest import NAMESPACE, ClientFactory, closed_port


def _assign(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["assign", "--namespace", NAMESPACE, *args])
    return result.exit_code, result.output


def test_pin_and_release(
    zk_client: ClientFactory, layout: GroupLayout, zookeeper_hosts: str
) -> None:
    base = ["--group", layout.group, "--zookeeper", zookeeper_hosts]
    code, out = _assign(*base, "--range", "0-999", "--member", "worker-2")
    assert code == 0, out
    assert "pinned 0-999 to worker-2" in out
    pins = Pins(zk_client(), layout)
    assert pins.list() == {SlotRange(0, 999): "worker-2"}

    code, out = _assign(*base, "--range", "500-1500", "--member", "worker-3")
    assert code == 1 and "overlaps" in out

    code, out = _assign(*base, "--range", "0-999", "--release")
    assert code == 0 and "released" in out
    assert pins.list() == {}


def test_usage_errors(layout: GroupLayout, zookeeper_hosts: str) -> None:
    base = ["--group", layout.group, "--zookeeper", zookeeper_hosts]
    code, out = _assign(*base, "--range", "9-1", "--member", "m")
    assert code == 2 and "must not exceed" in out
    code, out = _assign(*base, "--range", "0-9")
    assert code == 2 and "exactly one of --member and --release" in out
    code, out = _assign(
        "--group",
        "no-such-group",
        "--zookeeper",
        zookeeper_hosts,
        "--range",
        "0-9",
        "--member",
        "m",
    )
    assert code == 1 and "no coordination data" in out


def test_unreachable_zookeeper() -> None:
    hosts = f"127.0.0.1:{closed_port()}"
    code, out = _assign(
        "--group", "g", "--zookeeper", hosts, "--range", "0-9", "--member", "m", "--timeout", "0.5"
    )
    assert code == 1 and hosts in out
