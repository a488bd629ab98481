"""``KeyHolds``: a key's records wait for its fenced calls, and only its records do."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from keyshared.core.stragglers import KeyHolds

KEYS = st.sampled_from("abcd")
SOURCES = st.sampled_from(["s1", "s2", "s3"])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("fence"), SOURCES, st.lists(KEYS, max_size=4)),
        st.tuples(st.just("admit"), KEYS),
        st.tuples(st.just("ended"), SOURCES, KEYS),
        st.tuples(st.just("source_ended"), SOURCES),
        st.tuples(st.just("withdraw"), KEYS),
    ),
    max_size=60,
)


def test_the_docstring_example() -> None:
    holds = KeyHolds[str, str]()
    holds.fence("old window", ["k", "j"])
    assert not holds.admit("k", "k@7")
    assert holds.admit("x", "x@8")
    assert holds.ended("old window", "k") == ["k@7"]
    assert holds.admit("k", "k@9")
    assert holds  # j's call still runs
    assert holds.source_ended("old window") == []
    assert not holds


@given(OPS)
def test_an_item_starts_only_once_no_fenced_call_of_its_key_runs(ops: list[tuple]) -> None:  # type: ignore[type-arg]
    """Against a plain model: ``admit`` lets an item start exactly when no fenced call of its
    key runs; a waiting item comes back exactly once, when its key's last call ends, in the
    order its key's items came; a call its source was not fenced with changes nothing; and
    other keys never wait."""
    holds = KeyHolds[str, str]()
    running: dict[str, Counter[str]] = {}  # source -> calls per key
    waiting: dict[str, list[str]] = {}
    released: list[str] = []
    serial = 0

    def runs(key: str) -> bool:
        return any(calls[key] for calls in running.values())

    def expect(key: str, got: list[str]) -> None:
        want = waiting.pop(key, []) if not runs(key) else []
        assert got == want

    for op in ops:
        if op[0] == "fence":
            _, source, keys = op
            holds.fence(source, keys)
            running.setdefault(source, Counter()).update(keys)
        elif op[0] == "admit":
            key = op[1]
            serial += 1
            item = f"{key}{serial}"
            started = holds.admit(key, item)
            assert started == (not runs(key))
            if not started:
                waiting.setdefault(key, []).append(item)
        elif op[0] == "ended":
            _, source, key = op
            calls = running.get(source, Counter())
            got = holds.ended(source, key)
            if calls[key]:
                calls[key] -= 1
                expect(key, got)
            else:
                assert got == []
            released.extend(got)
        elif op[0] == "source_ended":
            calls = running.pop(op[1], Counter())
            got = holds.source_ended(op[1])
            want = [item for key in calls if calls[key] and not runs(key)
                    for item in waiting.pop(key, [])]  # fmt: skip
            assert sorted(got) == sorted(want)
            for key in {item[0] for item in got}:  # per key, in the order they came
                assert [i for i in got if i[0] == key] == [i for i in want if i[0] == key]
            released.extend(got)
        else:
            key = op[1]
            got = holds.withdraw(lambda item, k=key: item[0] != k)  # type: ignore[misc]
            assert got == waiting.pop(key, [])
        assert bool(holds) == any(runs(k) for k in "abcd")
        assert holds.waiting() == sum(len(items) for items in waiting.values())
    assert len(released) == len(set(released)), "an item came back twice"
