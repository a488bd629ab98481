"""Which records of a batch failed, and with what: the rule behind batch handlers, pure.

Why a rule of its own: a batch handler reports one outcome for many records, and every record
must still follow the retry and poison policy on its own. The rule is small but each branch
decides whether a record is counted done, so it is tested directly (``tests/core``):

- the handler returned: every record succeeded;
- it raised a ``BatchError``: the records it names failed with their own exceptions, the rest
  succeeded;
- a ``BatchError`` naming an index the batch does not have is a bug in the handler, and
  counting the others done on its word would be a guess: every record fails, with an error
  that names the index;
- any other exception: every record failed with it.

Example::

    >>> batch_failures(3, None, None)
    {}
    >>> err = KeyError("x")
    >>> batch_failures(3, err, {1: err}) == {1: err}
    True
    >>> sorted(batch_failures(2, TimeoutError(), None))
    [0, 1]
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["InvalidBatchError", "batch_failures"]


class InvalidBatchError(ValueError):
    """A batch handler's ``BatchError`` named an index outside its batch."""


def batch_failures(
    size: int, error: BaseException | None, named: Mapping[int, BaseException] | None
) -> dict[int, BaseException]:
    """Failed batch indices -> the exception each failed with.

    :param size: how many records the handler received.
    :param error: what the handler raised, or None when it returned.
    :param named: ``BatchError.failures`` when ``error`` is a ``BatchError``, else None.
    """
    if error is None:
        return {}
    if named is None:
        return dict.fromkeys(range(size), error)
    outside = sorted(index for index in named if not 0 <= index < size)
    if outside:
        invalid = InvalidBatchError(
            f"the handler's BatchError names index {outside[0]}, but its batch held {size} "
            f"record(s) (indices 0..{size - 1}): every record of the batch counts as failed"
        )
        invalid.__cause__ = error
        return dict.fromkeys(range(size), invalid)
    return dict(named)
