"""Adapters over confluent-kafka: the poll loop, dispatch, workers, commits, DLQ, key state.

Import the consumer from ``keyshared`` (``keyshared.KeySharedConsumer``); the modules here are
the implementation, one responsibility each.
"""
