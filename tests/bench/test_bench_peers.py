"""The bench peers: Confluent Parallel Consumer and pyrallel-consumer, raced by ``add_peers``.

Unit tests cover the pure parts (command lines, result parsing, skip notes, options). One
integration test installs the peers if they are missing (``tests/run.sh`` already did, so it
finds them in place) and really runs each of them on a tiny topic of the session's broker: it
fails, never skips, when a peer cannot be installed or does not count its records. No timing is
asserted: the figures are in docs/benchmarks.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from keyshared.bench.context import BenchContext
from keyshared.bench.peers import add_peers, install_peers, pyrallel
from keyshared.bench.peers import parallel_consumer as pc
from keyshared.bench.peers.common import (
    INSTALL_HINT,
    PEERS_CACHE_ENV,
    PeerRunError,
    default_peers_cache,
    parse_timing,
)
from keyshared.bench.result import Measurement, ScenarioResult, steady_name, timed
from keyshared.bench.workload import produce, uniform_keys
from keyshared.cli.bench import bench
from keyshared.dev.topics import TopicFactory


def test_parse_timing_reads_the_last_json_line() -> None:
    out = 'starting\n{"records": 1, "seconds": 9}\nnoise\n{"records": 300, "seconds": 0.5}\n'
    timing = parse_timing("peer", 0, out, "")
    assert (timing.records, timing.seconds) == (300, 0.5)


@pytest.mark.parametrize(
    ("returncode", "stdout", "stderr", "message"),
    [
        (1, '{"records": 3, "seconds": 1}', "boom: no broker", "exit 1): boom: no broker"),
        (0, "no json here", "", "exit 0): no output"),
        (0, '{"records": "many", "seconds": 1}', "", "unreadable result"),
        (0, '{"seconds": 1}', "", "unreadable result"),
        (0, '{"records": 0, "seconds": 1}', "", "impossible result"),
        (0, '{"records": 5, "seconds": 0}', "", "impossible result"),
    ],
)
def test_parse_timing_names_the_peer_and_the_problem(
    returncode: int, stdout: str, stderr: str, message: str
) -> None:
    with pytest.raises(PeerRunError, match=r"^my-peer") as info:
        parse_timing("my-peer", returncode, stdout, stderr)
    assert message in str(info.value)


def test_harness_command_passes_nanoseconds_and_the_classpath(tmp_path: Path) -> None:
    install = pc.PcInstall(jar_cache=tmp_path / "jars", peers_cache=tmp_path / "peers")
    command = pc.harness_command(
        "/usr/bin/java", install, "127.0.0.1:9092", "t", "g", 3000, 0.005, 64, 120.4
    )
    assert command[0] == "/usr/bin/java"
    assert command[command.index("-cp") + 1] == f"{install.classes}:{install.jars}/*"
    tail = command[command.index(pc.HARNESS_CLASS) + 1 :]
    assert tail == ["127.0.0.1:9092", "t", "g", "3000", "5000000", "64", "120"]
    batched = pc.harness_command("java", install, "b", "t", "g", 10, 0.0, 4, 9, batch_size=50)
    assert batched[-2:] == ["9", "50"]  # PC's batch mode: the optional last argument


@pytest.mark.parametrize(
    ("records", "handler_s", "concurrency", "batch_size"),
    [(0, 0.0, 4, 1), (5, -1.0, 4, 1), (5, 0.0, 4, 0)],
)
def test_harness_command_rejects_bad_sizes(
    tmp_path: Path, records: int, handler_s: float, concurrency: int, batch_size: int
) -> None:
    install = pc.PcInstall(jar_cache=tmp_path, peers_cache=tmp_path)
    with pytest.raises(ValueError, match="parallel-consumer run needs"):
        pc.harness_command(
            "java", install, "b", "t", "g", records, handler_s, concurrency, 9, batch_size
        )


def test_pc_install_folders_are_keyed_by_version_and_content(tmp_path: Path) -> None:
    install = pc.PcInstall(jar_cache=tmp_path / "jars", peers_cache=tmp_path / "peers")
    assert install.version == pc.parallel_consumer_version() == "0.5.3.3"
    assert install.jars.parent == tmp_path / "jars"
    assert install.jars.name.startswith("parallel-consumer-0.5.3.3-")
    assert install.classes.parent == tmp_path / "peers"
    assert not install.jars_ready and not install.harness_ready
    assert pc.parallel_consumer_install(install) is None  # nothing cached there: skipped


def test_pyrallel_worker_command_checks_its_mode() -> None:
    command = pyrallel.worker_command("/py", "async", "b", "t", "g", 10, 0.005, 8, 60.0)
    assert command[0] == "/py" and command[3].endswith("pyrallel_worker.py")
    assert command[4:] == ["async", "b", "t", "g", "10", "0.005", "8", "60.0"]
    with pytest.raises(ValueError, match="pyrallel mode must be one of async, process"):
        pyrallel.worker_command("/py", "thread", "b", "t", "g", 10, 0.0, 8, 60.0)
    with pytest.raises(ValueError, match="concurrency >= 1"):
        pyrallel.worker_command("/py", "process", "b", "t", "g", 10, 0.0, 0, 60.0)


def test_skip_notes_say_how_to_install(tmp_path: Path) -> None:
    assert INSTALL_HINT in pc.skip_note() and "0.5.3.3" in pc.skip_note()
    note = pyrallel.skip_note(str(tmp_path / "nope"))
    assert INSTALL_HINT in note and str(tmp_path / "nope") in note
    assert "--ignore-requires-python pyrallel-consumer==1.0.0" in note


def test_peers_cache_follows_its_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(PEERS_CACHE_ENV, str(tmp_path))
    assert default_peers_cache() == tmp_path
    assert pyrallel.default_pyrallel_python() == tmp_path / "pyrallel-venv" / "bin" / "python"


@pytest.mark.integration  # asks a Python interpreter (here a missing one) for its version
def test_add_peers_leaves_notes_when_peers_are_off_or_missing(tmp_path: Path) -> None:
    ctx = BenchContext(
        "127.0.0.1:1", parallel_consumer=False, pyrallel_python=str(tmp_path / "no-python")
    )
    result = ScenarioResult("io", "test", {})
    ks = Measurement("keyshared", 10, 10.0)
    added = add_peers(
        ctx, result, topic="t", records=10, handler_s=0.0, concurrency=2, keyshared=ks
    )
    assert added == [] and result.measurements == [] and result.ratios == {}
    assert result.notes[0] == "Confluent Parallel Consumer: skipped (--no-parallel-consumer)"
    assert result.notes[1] == pyrallel.skip_note(str(tmp_path / "no-python"))


def test_bench_help_lists_the_peer_options() -> None:
    done = CliRunner().invoke(bench, ["--help"], terminal_width=200)
    assert done.exit_code == 0
    for option in (
        "--install-peers",
        "--pyrallel-python",
        "--no-parallel-consumer",
        "--no-pyrallel",
    ):
        assert option in done.output


@pytest.mark.timeout(900)  # a first install fetches jars and two venvs
def test_every_peer_counts_the_records_of_a_tiny_topic(
    kafka_bootstrap: str, new_topic: TopicFactory
) -> None:
    failed = [f"{o.peer}: {o.detail}" for o in install_peers() if not o.ok]
    assert not failed, "peers could not be installed:\n" + "\n".join(failed)
    records = 200
    topic = new_topic(1, prefix="peers")
    produce(kafka_bootstrap, topic, uniform_keys(records, 40))
    ctx = BenchContext(kafka_bootstrap)
    result = ScenarioResult("peers", "test", {})
    added = add_peers(
        ctx,
        result,
        topic=topic,
        records=records,
        handler_s=0.001,
        concurrency=4,
        keyshared=timed("keyshared", records, 0.2, [k / 1000 for k in range(1, records + 1)], 1),
        timeout=120.0,
    )
    assert result.notes == []  # no skip, no failure
    assert [m.records for m in added] == [records, records, records]
    assert all(m.seconds > 0 for m in added)
    # Every peer reports its completion marks, so every ratio comes both ways.
    assert all(m.steady_records > 0 and m.steady_seconds > 0 for m in added)
    whole = {
        "keyshared_vs_parallel_consumer",
        "keyshared_vs_pyrallel_async",
        "keyshared_vs_pyrallel_process",
    }
    assert set(result.ratios) == whole | {steady_name(name) for name in whole}
