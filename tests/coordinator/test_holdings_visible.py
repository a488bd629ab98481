"""An operator sees what a coordinated member holds and in which phase: ``/readyz`` names each
lease, range or lock with its phase and age, ``keyshared status`` prints them, and
``keyshared_holdings{mode,phase}`` counts them — read from the endpoint's thread while the poll
thread moves them on.

Real members: a ``key_shared`` member holding the one range, a ``partition`` member holding its
partition's lease and an ``exclusive`` member holding the lock; a second ``key_shared``
member joining makes the first hand a range over, which the first shows leaving its holdings.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest
from prometheus_client import REGISTRY
from rich.console import Console

from keyshared.cli.status import _render_live
from keyshared.ops.member_view import fetch_member
from tests.coordinator.conftest import WAIT_S
from tests.coordinator.members import StartMember
from tests.helpers import wait_until
from tests.kafka.support.inprocess import Recorder


def _readyz(url: str) -> dict[str, Any]:
    base = url.rsplit("/", 1)[0]
    try:
        with urllib.request.urlopen(base + "/readyz", timeout=5) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:  # not ready: the body still says what it holds
        body = exc.read()
    return dict(json.loads(body))


def _phases(url: str) -> list[tuple[str, str]]:
    return [(h["name"], h["phase"]) for h in _readyz(url)["holdings"]]


def _gauge(group: str, member: str, mode: str, phase: str) -> float | None:
    labels = {"group": group, "member": member, "mode": mode, "phase": phase}
    return REGISTRY.get_sample_value("keyshared_holdings", labels)


@pytest.mark.parametrize(
    ("mode", "name"),
    [("key_shared", "0-65535"), ("partition", "{topic}[0]"), ("exclusive", "the active role")],
)
def test_a_members_holdings_show_in_readyz_status_and_the_gauge(
    mode: str,
    name: str,
    start: StartMember,
    new_topic: object,
    new_group: object,
) -> None:
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group(f"visible-{mode}")  # type: ignore[operator]
    name = name.format(topic=topic)
    run = start(group, topic, Recorder(pid=1), member="A", mode=mode, metrics_port=0)
    url = run.consumer.metrics_url
    assert url
    wait_until(lambda: (name, "active") in _phases(url), f"A to show {name} active", WAIT_S)
    [holding] = _readyz(url)["holdings"]
    assert holding["alive"] is True and holding["age"] >= 0
    wait_until(lambda: _gauge(group, "A", mode, "active") == 1.0, "the gauge", WAIT_S)
    assert _gauge(group, "A", mode, "waiting") == 0.0
    assert _gauge(group, "A", mode, "handing_back") == 0.0

    console = Console(record=True, width=200)
    _render_live(console, fetch_member(url, group, timeout=5.0))
    assert f"Holdings: {name} active (" in console.export_text()


def test_a_range_handed_over_leaves_the_first_members_holdings(
    start: StartMember, new_topic: object, new_group: object
) -> None:
    topic = new_topic(1)  # type: ignore[operator]
    group = new_group("visible-handover")  # type: ignore[operator]
    first = start(group, topic, Recorder(pid=1), member="A", metrics_port=0)
    url = first.consumer.metrics_url
    assert url
    wait_until(lambda: _phases(url) == [("0-65535", "active")], "A to hold everything", WAIT_S)
    start(group, topic, Recorder(pid=2), member="B")
    wait_until(
        lambda: len(_phases(url)) == 1 and _phases(url)[0][1] == "active"
        and _phases(url)[0][0] != "0-65535",
        "A to hold one range only, having handed the other to B",
        WAIT_S,
    )  # fmt: skip
    wait_until(lambda: _gauge(group, "A", "key_shared", "active") == 1.0, "the gauge", WAIT_S)
    assert _gauge(group, "A", "key_shared", "handing_back") == 0.0
