"""The peer libraries ``keyshared bench`` races keyshared against, each in its own process.

- Confluent Parallel Consumer (Java, ``parallel_consumer.py`` + ``KeysharedPcHarness.java``),
- pyrallel-consumer (Python, own venv; ``pyrallel.py`` + ``pyrallel_worker.py``).

quixstreams, the older peer, stays in ``keyshared/bench/quix.py``; ``install.py`` installs all
three (``keyshared bench --install-peers``). A scenario adds the peers with one call,
:func:`add_peers` (see ``race.py``).
"""

from __future__ import annotations

from keyshared.bench.peers.install import PeerInstall, install_peers
from keyshared.bench.peers.race import add_peers

__all__ = ["PeerInstall", "add_peers", "install_peers"]
