"""ZooKeeper coordination for keyshared (slot ranges, leases, drains, fencing).

The coordinator arrives with its own issue; this package exists now so the layout and the
packaging are fixed from the first commit.
"""

__all__: list[str] = []
