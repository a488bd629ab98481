"""The coordinated modes inside a consumer: ``key_shared``, partition leases and ``exclusive``.

Each fills the consumer's seams (membership, ownership, cursor store) with the ZooKeeper
recipes of :mod:`coordinator`, which it sees only through :mod:`keyshared.modes.recipes`, so no
recipe depends on a mode. :func:`keyshared.modes.plug.plug` picks the mode for one run.
"""
