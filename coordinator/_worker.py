"""A thread that re-reads ZooKeeper state when poked: the bridge from kazoo's watch callbacks.

kazoo runs watch callbacks on its own event thread, which must not block and serves every
watch of the client. The recipes' watch callbacks only *poke* a :class:`Refresher`; its thread
then reads the current state and calls the user's callback. Pokes that arrive while a refresh
runs coalesce into one more refresh, so a burst of changes costs one read, and the callback
always sees the latest state rather than a replay of every intermediate one.

A refresh that fails because the connection dropped is not lost: given the client, the
refresher refreshes again whenever the client (re)connects.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from kazoo.client import KazooClient, KazooState

__all__ = ["Refresher"]

log = logging.getLogger(__name__)


class Refresher:
    """Runs ``refresh`` on its own thread after each :meth:`poke`, coalescing bursts.

    :param name: the thread's name (shows in thread dumps).
    :param refresh: reads state and acts on it; an exception is logged and the thread goes on.
    :param client: when given, every (re)connection of this client pokes too, so a refresh that
        failed during an outage, or a change missed while disconnected, is caught up.
    """

    def __init__(
        self, name: str, refresh: Callable[[], None], client: KazooClient | None = None
    ) -> None:
        self._refresh = refresh
        self._client = client
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()
        if client is not None:
            client.add_listener(self._on_state)

    def _on_state(self, state: str) -> bool:
        if state == KazooState.CONNECTED:
            self._wake.set()
        return False

    def poke(self) -> None:
        """Ask for one more refresh (safe from any thread, never blocks)."""
        self._wake.set()

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            if self._stopped.is_set():
                return
            self._wake.clear()
            try:
                self._refresh()
            except Exception:
                log.exception("%s: refresh failed", self._thread.name)

    def stop(self) -> None:
        """End the thread after the refresh in progress, if any."""
        self._stopped.set()
        self._wake.set()
        if self._client is not None:
            self._client.remove_listener(self._on_state)
        if threading.current_thread() is not self._thread:
            self._thread.join()
