"""PromQL for the dashboard's panels, with the label filters written once.

Every panel query filters by the dashboard's ``$group`` (and, for per-partition series,
``$topic``) variables and takes rates over ``$__rate_interval``; spelled out thirty times, one
typo in a filter would silently empty one panel. These helpers are the only place they appear.
"""

from __future__ import annotations

__all__ = ["RI", "M", "P", "increase", "per_partition", "quantile", "rate"]

# Label filters: per-partition series carry topic; member-level series only group.
P = 'group=~"$group",topic=~"$topic"'
M = 'group=~"$group"'
RI = "[$__rate_interval]"


def per_partition(metric: str, agg: str = "max") -> str:
    """A per-partition gauge, one series per topic/partition (members agree; max picks one)."""
    return f"{agg} by (topic, partition) ({metric}{{{P}}})"


def rate(metric: str, by: str, sel: str = P) -> str:
    """A counter's per-second rate, summed over members and partitions into ``by``."""
    return f"sum by ({by}) (rate({metric}{{{sel}}}{RI}))"


def increase(metric: str, by: str, sel: str = M) -> str:
    """A rare event counter's increase per interval: a count reads better than a tiny rate."""
    return f"sum by ({by}) (increase({metric}{{{sel}}}{RI}))"


def quantile(q: float, metric: str, sel: str = P, by: str = "") -> str:
    """The ``q`` quantile of a histogram over all members (and per ``by`` if given)."""
    group = f"le, {by}" if by else "le"
    return f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{sel}}}{RI})))"
