"""Run one task per server side by side, and report their failures as one error.

Why in parallel: a cold start of Kafka and ZooKeeper takes ~10 s each on two cores, and so can
a controlled shutdown; side by side, `up` and `down` take as long as the slower server. Why an
abort event: when one server fails to start there is no point waiting out the other's start
timeout, so the first failure sets the event and every wait loop watches it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait

from keyshared.dev.errors import DevClusterError, StartupError

__all__ = ["combined_error", "run_parallel"]


def run_parallel(
    tasks: Mapping[str, Callable[[], None]], abort: threading.Event
) -> list[BaseException]:
    """Run one task per server in parallel; the first failure aborts the others' waits.

    Returns the tasks' exceptions (empty when all succeeded). An interruption of the caller
    (Ctrl-C) sets `abort`, waits for the tasks to stop and is re-raised.
    """

    def guarded(task: Callable[[], None]) -> None:
        try:
            task()
        except BaseException:
            abort.set()
            raise

    pool = ThreadPoolExecutor(max_workers=len(tasks), thread_name_prefix="keyshared-dev")
    futures = [pool.submit(guarded, task) for task in tasks.values()]
    try:
        wait(futures)
    except BaseException:
        abort.set()  # interrupted: the tasks stop waiting, then the caller cleans up
        wait(futures)
        raise
    finally:
        pool.shutdown(wait=True)
    return [exc for future in futures if (exc := future.exception()) is not None]


def combined_error(errors: list[BaseException]) -> BaseException:
    """One exception for one or two failed servers (a DevClusterError keeps its type)."""
    if len(errors) == 1:
        return errors[0]
    first = errors[0]
    message = "\n".join(str(error) for error in errors)
    if isinstance(first, StartupError):
        return StartupError(message, first.log_file)
    return DevClusterError(message) if isinstance(first, DevClusterError) else first
