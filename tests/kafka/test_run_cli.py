"""``keyshared run MODULE:FUNC``: runs a handler module, drains and commits on SIGTERM (issue 4)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from keyshared.dev.topics import unique_name
from tests.kafka.support.journal import (
    ASYNC_HANDLER,
    BATCH_HANDLER,
    HANDLER,
    REPO_ROOT,
    check,
    committed,
    count_finished,
    high_watermarks,
    kill_all,
    produce,
    read_journal,
    sequenced,
    start_consumer,
    terminate,
    wait_for,
)
from tests.kafka.support.journal import (
    keyshared_command as _keyshared,
)


def _cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*_keyshared(), *args],
        cwd=REPO_ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.integration  # runs `keyshared run` as a process
def test_help_explains_the_command() -> None:
    result = _cli("run", "--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for expected in (
        "MODULE:FUNC",
        "--bootstrap-servers",
        "--group",
        "--topic",
        "--workers",
        "--poison",
        "--dlq-topic",
        "--max-attempts",
        "--metrics-port",
        "/readyz",
        "--stuck-after",
        "--wedged-after",
        "--mode",
        "--zookeeper",
        "--batch-size",
        "--batch-linger",
        "-X",
        "SIGTERM",
        "KEYSHARED_BOOTSTRAP_SERVERS",
    ):
        assert expected in text, f"--help does not mention {expected}"


@pytest.mark.integration  # runs `keyshared run` as a process
def test_usage_errors_are_clear() -> None:
    missing = _cli("run", HANDLER, "-b", "127.0.0.1:9", "-t", "t")
    assert missing.returncode == 2 and "--group" in missing.stderr
    bad_spec = _cli("run", "no_such_module_xyz:handle", "-b", "127.0.0.1:9", "-g", "g", "-t", "t")
    assert bad_spec.returncode == 2
    assert "no_such_module_xyz" in bad_spec.stderr and "Traceback" not in bad_spec.stderr
    # A liveness bound a revoke's drain could exceed would restart healthy pods.
    wedged = _cli(
        "run", HANDLER, "-b", "127.0.0.1:9", "-g", "g", "-t", "t",
        "--drain-timeout", "30", "--wedged-after", "10", env={"KS_JOURNAL": os.devnull},
    )  # fmt: skip
    assert wedged.returncode == 2 and "wedged_after" in wedged.stderr, wedged.stderr


@pytest.mark.parametrize("handler", [HANDLER, ASYNC_HANDLER], ids=["sync", "async"])
def test_run_drains_and_commits_on_sigterm(
    kafka_bootstrap: str, new_topic, new_group, tmp_path: Path, handler: str
) -> None:
    """SIGTERM while a slow record runs: it finishes, everything is committed, exit 0.

    The bootstrap servers come from ``KEYSHARED_BOOTSTRAP_SERVERS`` and ``-X client.id``
    must reach librdkafka: the broker reports it for the group's member.
    """
    topic = new_topic(partitions=3)
    group = new_group("cli")
    keys = [f"key-{i:02d}".encode() for i in range(50)]
    produce(kafka_bootstrap, topic, [*sequenced(keys, 10), (b"slow", 1)])
    journal = tmp_path / "journal"
    client_id = unique_name("cli-client")
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *_keyshared(),
                "run",
                handler,
                "-g",
                group,
                "-t",
                topic,
                "--workers",
                "4",
                "--poison",
                "drop",
                "-X",
                f"client.id={client_id}",
            ],
            cwd=REPO_ROOT,
            env={
                **os.environ,
                "KEYSHARED_BOOTSTRAP_SERVERS": kafka_bootstrap,
                "KS_JOURNAL": str(journal),
                "KS_SLOW_KEY": "slow",
                "KS_SLOW_SECONDS": "3",
            },
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: count_finished(journal) >= 500, 60, "the fast records")
        wait_for(
            lambda: any(e.key == b"slow" for e in read_journal(journal)), 30, "the slow record"
        )
        members = _group_members(kafka_bootstrap, group)
        assert [m.client_id for m in members] == [client_id]
        assert terminate(proc, timeout=60) == 0, log.read_text()[-3000:]
    finally:
        kill_all([proc])
    events = read_journal(journal)
    report = check(events, {**dict.fromkeys(keys, 10), b"slow": 1})
    assert not report.missing and not report.violations, report.summary()
    # The drain waited for the slow call, and the final commit covers everything.
    ends = high_watermarks(kafka_bootstrap, topic)
    offsets = committed(kafka_bootstrap, group, topic)
    assert {p: o for p, (o, _) in offsets.items()} == ends
    assert "draining" in log.read_text()


def test_run_with_batch_size_hands_the_handler_batches_and_fails_only_named_records(
    kafka_bootstrap: str, new_topic, new_group, tmp_path: Path
) -> None:
    """``--batch-size``: one worker, so without batches every start is followed by its end;
    with them, several records start before the first ends. Injected failures (5% of records,
    first attempt only) go through ``BatchError``: each is retried alone, nothing is lost or
    reordered, and the drain commits everything."""
    topic = new_topic(partitions=2)
    group = new_group("cli-batch")
    keys = [f"key-{i:02d}".encode() for i in range(50)]
    produce(kafka_bootstrap, topic, sequenced(keys, 10))
    journal = tmp_path / "journal"
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                *_keyshared(),
                "run",
                BATCH_HANDLER,
                "-g",
                group,
                "-t",
                topic,
                "--workers",
                "1",
                "--batch-size",
                "25",
                "--max-attempts",
                "3",
            ],
            cwd=REPO_ROOT,
            env={
                **os.environ,
                "KEYSHARED_BOOTSTRAP_SERVERS": kafka_bootstrap,
                "KS_JOURNAL": str(journal),
                "KS_SLEEP_MS": "1,3",
                "KS_FAIL_ONCE_RATE": "0.05",
            },
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: count_finished(journal) >= 500, 60, "every record")
        assert terminate(proc, timeout=60) == 0, log.read_text()[-3000:]
    finally:
        kill_all([proc])
    events = read_journal(journal)
    report = check(events, dict.fromkeys(keys, 10))
    assert not report.missing and not report.violations, report.summary()
    assert report.duplicates == 0, report.summary()
    kinds = "".join(e.kind for e in events)
    assert "SS" in kinds, "no record started before the previous one ended: no batches"
    assert "F" in kinds, "no injected failure (the 5% of records should include some)"
    retried = {(e.key, e.seq) for e in events if e.attempt == 2}
    failed = {(e.key, e.seq) for e in events if e.kind == "F"}
    assert retried == failed, "exactly the failed records were retried"
    ends = high_watermarks(kafka_bootstrap, topic)
    offsets = committed(kafka_bootstrap, group, topic)
    assert {p: o for p, (o, _) in offsets.items()} == ends


def test_bad_librdkafka_property_is_a_clear_error(kafka_bootstrap: str, new_topic) -> None:
    topic = new_topic(partitions=1)
    result = _cli(
        "run",
        HANDLER,
        "-b",
        kafka_bootstrap,
        "-g",
        unique_name("g"),
        "-t",
        topic,
        "-X",
        "no.such.property=1",
        env={"KS_JOURNAL": os.devnull},
        timeout=30,
    )
    assert result.returncode != 0
    assert "no.such.property" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr[-2000:]


def _group_members(bootstrap: str, group: str) -> list[object]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group], request_timeout=10)[group].result(10)
    return list(description.members)


def test_second_sigterm_exits_at_once_without_committing_past_a_running_record(
    kafka_bootstrap: str, new_topic, new_group, tmp_path: Path
) -> None:
    topic = new_topic(partitions=1)
    group = new_group("cli-twice")
    produce(kafka_bootstrap, topic, [(b"a", 1), (b"slow", 1), (b"b", 1)])
    journal = tmp_path / "journal"
    proc = start_consumer(
        kafka_bootstrap,
        group,
        topic,
        journal,
        env={"KS_SLOW_KEY": "slow", "KS_SLOW_SECONDS": "120"},
        log=tmp_path / "run.log",
    )
    try:
        wait_for(lambda: count_finished(journal) >= 2, 60, "the fast records")
        wait_for(lambda: any(e.key == b"slow" for e in read_journal(journal)), 30, "slow start")
        proc.send_signal(signal.SIGTERM)  # drains: waits for the slow call
        wait_for(lambda: "draining" in (tmp_path / "run.log").read_text(), 10, "the drain")
        assert proc.poll() is None, "the first SIGTERM did not wait for the running record"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(10)
        assert time.monotonic() - started < 5
        assert code != 0
    finally:
        kill_all([proc])
    slow_offset = next(e.offset for e in read_journal(journal) if e.key == b"slow")
    offset, _ = committed(kafka_bootstrap, group, topic)[0]
    assert offset <= slow_offset, "committed past a record that never finished"


def _slow_import_handler(where: Path, module: str) -> tuple[Path, Path]:
    """A handler module whose import touches the first path returned, then waits until the
    second exists."""
    started, go = where / "importing", where / "go"
    (where / f"{module}.py").write_text(
        "import pathlib, time\n"
        f"pathlib.Path({str(started)!r}).touch()\n"
        f"while not pathlib.Path({str(go)!r}).exists():\n"
        "    time.sleep(0.01)\n"
        "def handle(record):\n"
        "    pass\n"
    )
    return started, go


@pytest.mark.integration  # runs `keyshared run` as a process
def test_sigterm_during_startup_exits_cleanly(tmp_path: Path) -> None:
    """A SIGTERM that arrives while the handler module is still being imported (before the
    consumer exists) is a clean stop, not a death by signal (issue 10, item 7)."""
    started, go = _slow_import_handler(tmp_path, "slow_import_handler")
    args = ["run", "slow_import_handler:handle", "-b", "127.0.0.1:9", "-g", "g", "-t", "t"]
    proc = subprocess.Popen(
        [*_keyshared(), *args, "--startup-timeout", "30"],
        cwd=tmp_path,
        # The repository first: the test must exercise the code beside it, not whatever an
        # installed console script would import (a worktree or copy would test the wrong code).
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(tmp_path)])},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(started.exists, 60, "the handler module's import")
        proc.send_signal(signal.SIGTERM)
        go.touch()
        _, stderr = proc.communicate(timeout=60)
    finally:
        kill_all([proc])
    assert proc.returncode == 0, f"exit {proc.returncode}: {stderr[-2000:]}"


@pytest.mark.integration  # runs `keyshared run` as a process
def test_sigusr2_prints_every_threads_stack_and_keeps_running(tmp_path: Path) -> None:
    """A member that seems stuck can be asked where its threads are (docs/operations.md), and
    it goes on: the stacks of a handler module still importing, then a clean stop."""
    started, go = _slow_import_handler(tmp_path, "stuck_import_handler")
    args = ["run", "stuck_import_handler:handle", "-b", "127.0.0.1:9", "-g", "g", "-t", "t"]
    stderr_path = tmp_path / "stderr"
    with stderr_path.open("w") as stderr_file:
        proc = subprocess.Popen(
            [*_keyshared(), *args, "--startup-timeout", "30"],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(tmp_path)])},
            stdout=subprocess.DEVNULL,
            stderr=stderr_file,
        )
        try:
            wait_for(started.exists, 60, "the handler module's import")
            proc.send_signal(signal.SIGUSR2)
            wait_for(lambda: "stuck_import_handler.py" in stderr_path.read_text(), 30, "the stacks")
            assert proc.poll() is None, "SIGUSR2 stopped the process"
            assert "most recent call first" in stderr_path.read_text()
            proc.send_signal(signal.SIGTERM)
            go.touch()
            code = proc.wait(60)
        finally:
            kill_all([proc])
    assert code == 0, f"exit {code}: {stderr_path.read_text()[-2000:]}"
