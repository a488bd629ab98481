"""Operations tests: the Grafana dashboard proven on a real Prometheus."""
