"""Helpers for the consumer's real-broker tests: a journaling handler, producers, checkers."""
