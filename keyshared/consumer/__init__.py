"""``KeySharedConsumer``: its argument checks, its assembly from runtime and Kafka parts, and
the probes (``/healthz``, ``/readyz``, hot keys) that read the running parts."""
