"""The demo's quiet logger for librdkafka.

A cold broker makes librdkafka print its own chatter ("GETPID ... Coordinator load in progress",
disconnects when the cluster stops) straight to stderr, where it lands in the middle of the
demo's screen. Every client the demo builds passes this logger instead, so that chatter goes
through Python logging, where only errors are shown.
"""

from __future__ import annotations

import logging

__all__ = ["CLIENT_LOG"]

CLIENT_LOG = logging.getLogger("keyshared.demo.librdkafka")
CLIENT_LOG.setLevel(logging.ERROR)
