"""The concurrent runtime: dispatch, partition state, workers, execution and settlement.

It runs handlers and keeps each partition's window; it never talks to Kafka (nothing here
imports confluent-kafka, and a test checks it). The poll loop in :mod:`keyshared.kafka` feeds
it records and reads commit snapshots from it; the modes steer it through
:mod:`keyshared.runtime.control`.
"""
