"""``RefusedOutputs`` without a broker: which suspect is pinned, and when the probe gives the
producer up. ``test_transactions`` runs the same probe through the committer."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException

from keyshared.kafka.output_rules import OutputRules
from keyshared.kafka.refused_outputs import RefusedOutputs, Source
from keyshared.runtime.outputs import OutputMessage

REFUSED = KafkaError(KafkaError.INVALID_RECORD)


class Producer:
    """Refuses, alone, the outputs whose value is in ``refuse``; records every call."""

    def __init__(self, refuse: set[bytes], fail_begin: KafkaException | None = None) -> None:
        self.refuse = refuse
        self.fail_begin = fail_begin
        self.calls: list[str] = []

    def begin_transaction(self) -> None:
        self.calls.append("begin")
        if self.fail_begin is not None:
            raise self.fail_begin

    def abort_transaction(self, timeout: float) -> None:
        self.calls.append("abort")

    def flush(self, timeout: float) -> int:
        return 0

    def purge(self) -> None:
        self.calls.append("purge")


def _produce(producer: Producer) -> Any:
    def produce(message: OutputMessage, on_delivery: Any) -> None:
        on_delivery(REFUSED if message.value in producer.refuse else None, None)

    return produce


def _suspected(refused: RefusedOutputs, *offsets: int) -> list[tuple[Source, OutputMessage]]:
    """Outputs of records ``offsets`` of t[0], all reported refused (as one batch is)."""
    outputs = []
    for offset in offsets:
        source = ("t", 0, offset)
        refused.delivered(source, REFUSED, None)
        outputs.append((source, OutputMessage("out", b"k", b"v%d" % offset, None)))
    return outputs


def _never_fenced(exc: BaseException) -> bool:
    return False


def test_only_the_record_whose_own_output_is_refused_is_pinned() -> None:
    rules = OutputRules(1_000_000, None)
    refused = RefusedOutputs(rules, timeout=1.0)
    outputs = _suspected(refused, 0, 1, 2)
    producer = Producer(refuse={b"v1"})
    assert not refused.probe(outputs, producer, _produce(producer), _never_fenced)
    assert set(rules.refused) == {("t", 0, 1)}
    assert producer.calls == ["begin", "abort"] * 3
    assert not refused.probe(outputs, producer, _produce(producer), _never_fenced), "taken"
    assert producer.calls == ["begin", "abort"] * 3


def test_without_a_producer_the_suspects_wait_for_the_next_failure() -> None:
    rules = OutputRules(1_000_000, None)
    refused = RefusedOutputs(rules, timeout=1.0)
    outputs = _suspected(refused, 0)
    producer = Producer(refuse={b"v0"})
    assert not refused.probe(outputs, None, _produce(producer), _never_fenced)
    assert not refused.probe(outputs, producer, _produce(producer), _never_fenced)
    assert set(rules.refused) == {("t", 0, 0)}


def test_a_producer_that_fails_outside_a_transaction_is_purged_and_given_up() -> None:
    rules = OutputRules(1_000_000, None)
    refused = RefusedOutputs(rules, timeout=1.0)
    outputs = _suspected(refused, 0, 1)
    producer = Producer(set(), fail_begin=KafkaException(KafkaError(KafkaError._STATE)))
    assert refused.probe(outputs, producer, _produce(producer), _never_fenced)
    assert producer.calls == ["begin", "purge"], "the second suspect is not probed"
    assert not rules.refused


def test_a_fence_that_stopped_the_member_ends_the_probe_without_touching_the_producer() -> None:
    rules = OutputRules(1_000_000, None)
    refused = RefusedOutputs(rules, timeout=1.0)
    outputs = _suspected(refused, 0, 1)
    fence = KafkaException(KafkaError(KafkaError._FENCED, fatal=True))
    producer = Producer(set(), fail_begin=fence)
    seen: list[BaseException] = []

    def stopped(exc: BaseException) -> bool:
        seen.append(exc)
        return True

    assert refused.probe(outputs, producer, _produce(producer), stopped)
    assert seen == [fence] and producer.calls == ["begin"]
