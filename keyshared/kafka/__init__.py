"""What talks to Kafka: the poll loop, commits, transactions, the DLQ, the key-state topic,
backpressure, rewinds, positions and log ends.

Import the consumer from ``keyshared`` (``keyshared.KeySharedConsumer``); the runtime these
modules feed lives in :mod:`keyshared.runtime`.
"""
