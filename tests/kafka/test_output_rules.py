"""``record.output`` without a broker: what ``produce`` refuses (so the handler's attempt fails,
not the transaction), and sealing once the attempt ended.

The size rule is checked against librdkafka itself: a producer that never connects still
refuses an oversized message synchronously in ``produce``.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from hypothesis import given, settings
from hypothesis import strategies as st

from keyshared import OutputError
from keyshared.kafka.output_rules import OutputRules
from keyshared.runtime.outputs import Output, PartitionOutputs
from keyshared.runtime.pull import PullQueue

LIMIT = 3000


@pytest.fixture(scope="module")
def librdkafka() -> Any:
    producer = Producer(
        {"bootstrap.servers": "127.0.0.1:1", "message.max.bytes": LIMIT, "logger": _QUIET}
    )
    yield producer
    producer.purge()


class _Quiet:
    def log(self, *args: Any, **kwargs: Any) -> None:
        pass


_QUIET = _Quiet()

payloads = st.one_of(st.none(), st.binary(max_size=LIMIT), st.text(max_size=LIMIT // 3))
header_lists = st.one_of(
    st.none(),
    st.lists(
        st.tuples(st.text(min_size=1, max_size=150), st.one_of(st.none(), st.binary(max_size=300))),
        max_size=4,
    ),
)


@settings(max_examples=300, deadline=None)
@given(key=payloads, value=payloads, headers=header_lists)
def test_the_size_rule_is_librdkafkas(librdkafka: Any, key: Any, value: Any, headers: Any) -> None:
    """Refused by ``produce`` exactly when librdkafka would refuse it as too large."""
    extra = {} if headers is None else {"headers": headers}
    try:
        librdkafka.produce("t", value, key, **extra)
        refused = False
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.MSG_SIZE_TOO_LARGE
        refused = True
    except BufferError:
        librdkafka.purge()
        return
    rules = OutputRules(LIMIT, None)
    if refused:
        with pytest.raises(OutputError, match=r"message\.max\.bytes"):
            rules.check("t", key, value, headers)
    else:
        rules.check("t", key, value, headers)


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ("value", {"value": {"a": 1}}),
        ("value", {"value": 12345}),
        ("value", {"value": bytearray(b"x")}),
        ("key", {"key": 7}),
        ("header", {"headers": [("h", 1)]}),
        ("header", {"headers": "h=1"}),
    ],
)
def test_values_the_producer_cannot_send_are_refused_in_the_handler(
    librdkafka: Any, field: str, message: dict[str, Any]
) -> None:
    with pytest.raises(TypeError):  # what the transaction would have met
        librdkafka.produce("t", message.get("value"), message.get("key"),
                           headers=message.get("headers"))  # fmt: skip
    output = Output(OutputRules(LIMIT, None))
    with pytest.raises(OutputError, match=f"output to topic 'out' refused: .*{field}"):
        output.produce("out", **message)
    assert output.messages == []


class Lookups:
    """``list_topics`` answers: a topic's metadata, an error, or no answer."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.answers: dict[str, Any] = {}

    def __call__(self, topic: str) -> Any:
        self.asked.append(topic)
        answer = self.answers.get(topic)
        if isinstance(answer, BaseException):
            raise answer
        return answer


class Meta:
    def __init__(self, error: KafkaError | None = None, partitions: int = 1) -> None:
        self.error = error
        self.partitions = dict.fromkeys(range(partitions))


def test_a_topic_is_looked_up_once_and_a_missing_one_is_refused_for_a_while() -> None:
    lookups = Lookups()
    lookups.answers = {
        "out": Meta(),
        "missing": Meta(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)),
        "away": KafkaException(KafkaError(KafkaError._TIMED_OUT)),
    }
    rules = OutputRules(LIMIT, lookups, refusal_ttl=3600)
    for _ in range(100):
        rules.check("out", b"k", b"v", None)
    with pytest.raises(OutputError, match="does not exist"):
        rules.check("missing", b"k", b"v", None)
    with pytest.raises(OutputError, match="does not exist"):
        rules.check("missing", b"k", b"v", None)
    rules.check("away", b"k", b"v", None)  # no answer: never a reason to fail a record
    rules.check("away", b"k", b"v", None)
    assert lookups.asked == ["out", "missing", "away"]


def test_a_refused_topic_is_asked_again_after_the_refusal_expires() -> None:
    lookups = Lookups()
    lookups.answers = {"late": Meta(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))}
    rules = OutputRules(LIMIT, lookups, refusal_ttl=0.0)
    with pytest.raises(OutputError):
        rules.check("late", None, b"v", None)
    lookups.answers["late"] = Meta()  # created meanwhile
    rules.check("late", None, b"v", None)
    rules.check("late", None, b"v", None)
    assert lookups.asked == ["late", "late"]


def test_an_output_is_sealed_once_its_attempt_ended_and_staged_as_a_copy() -> None:
    output = Output()
    output.produce("out", value=b"1")
    staged = PartitionOutputs()
    staged.stage_attempt(7, output)
    with pytest.raises(OutputError, match="sealed"):
        output.produce("out", value=b"late")
    output.messages.append(output.messages[0])  # a handler holding on to the list
    assert [m.value for m in staged.staged[7]] == [b"1"]


def test_a_pulled_records_output_is_sealed_by_its_ack_nack_or_ack_timeout() -> None:
    later: list[Any] = []
    pull = PullQueue(1, 60.0, lambda delay, fn: later.append(fn))
    settled: list[str] = []

    class Executor:
        def prepare(self, state: Any, entry: Any) -> Any:
            from keyshared.record import Record

            return Record(b"k", b"v", "t", 0, entry.offset, (), None, 1, b"k", None, Output())

        def succeeded(self, state: Any, entry: Any, elapsed: float) -> None:
            settled.append(f"ack {entry.offset}")

        def failed(self, state: Any, entry: Any, exc: BaseException) -> None:
            settled.append(f"fail {entry.offset}")

    state = type("State", (), {"outputs": PartitionOutputs()})()
    pull.bind(Executor())  # type: ignore[arg-type]
    pull.submit(0, [(state, SimpleNamespace(offset=n)) for n in (1, 2, 3)])  # type: ignore[misc]
    acked, nacked, expired = (pull.get(1.0) for _ in range(3))
    assert acked is not None and nacked is not None and expired is not None
    acked.output.produce("out", value=b"in time")  # type: ignore[union-attr]
    assert pull.ack(acked) and pull.nack(nacked, ValueError("x"))
    later[2]()  # the third record's ack timeout
    for record in (acked, nacked, expired):
        with pytest.raises(OutputError, match="sealed"):
            record.output.produce("out", value=b"late")  # type: ignore[union-attr]
    assert [m.value for m in state.outputs.staged[1]] == [b"in time"]
    assert settled == ["ack 1", "fail 2", "fail 3"]


def test_a_thread_the_handler_left_running_cannot_add_to_a_committed_attempt() -> None:
    output = Output()
    started, sealed = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def background() -> None:
        started.set()
        sealed.wait(5)
        try:
            output.produce("out", value=b"late")
        except OutputError as exc:
            errors.append(exc)

    thread = threading.Thread(target=background)
    thread.start()
    started.wait(5)
    staged = PartitionOutputs()
    staged.stage_attempt(0, output)  # nothing produced: nothing staged
    sealed.set()
    thread.join(5)
    assert len(errors) == 1 and staged.staged == {}
