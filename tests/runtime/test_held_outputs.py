"""The byte count of held exactly-once outputs, kept as they move (no scan per poll)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keyshared.errors import ConfigurationError
from keyshared.runtime.outputs import OutputMessage, PartitionOutputs, held_bytes, message_bytes
from keyshared.settings import ConsumerOptions

_text = st.one_of(st.none(), st.binary(max_size=8), st.text(max_size=8))
_headers = st.one_of(
    st.none(),
    st.lists(st.tuples(st.text(max_size=4), _text), max_size=3),
    st.dictionaries(st.text(max_size=4), _text, max_size=3),
)
_message = st.builds(OutputMessage, st.just("out"), _text, _text, _headers)


def test_a_message_weighs_its_key_value_and_headers() -> None:
    message = OutputMessage("out", b"key", "välue", [("h", b"12"), ("empty", None)])
    assert message_bytes(message) == 3 + 5 + (1 + 2) + 5
    assert message_bytes(OutputMessage("out", None, None, {"a": "bc"})) == 3


@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("release"), st.lists(_message, max_size=3)),
            st.tuples(st.just("take"), st.none()),
            st.tuples(st.just("give_back"), st.integers(0, 5)),
            st.tuples(st.just("drop"), st.none()),
        ),
        max_size=30,
    )
)
def test_the_byte_count_is_the_weight_of_what_is_ready(steps: list[tuple[str, object]]) -> None:
    outputs = PartitionOutputs()
    taken: list[tuple[int, list[OutputMessage]]] = []
    offset = 0
    for step, arg in steps:
        if step == "release":
            assert isinstance(arg, list)
            outputs.stage(offset, arg)
            outputs.release(offset)
            offset += 1
        elif step == "take":
            taken = outputs.take()
        elif step == "give_back":
            assert isinstance(arg, int)
            outputs.give_back(taken[:arg])
            taken = []
        else:
            outputs.drop()
        assert outputs.ready_bytes == held_bytes(outputs.ready)
        assert (outputs.since is None) == (not outputs.ready) or step == "release"


@pytest.mark.parametrize("bad", [0, -1, 1.5, "64MiB"])
def test_the_held_output_budget_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="max_held_output_bytes"):
        ConsumerOptions(max_held_output_bytes=bad)  # type: ignore[arg-type]
    assert ConsumerOptions().max_held_output_bytes == 64 * 1024 * 1024
