#!/usr/bin/env bash
# The project's one test command (README quickstart, step 2; CI runs it through .ci/run).
# Installs whatever is missing on a fresh machine, then lints, type-checks and runs every test
# against a real Kafka broker and ZooKeeper that the test session starts on 127.0.0.1.
# Extra arguments go to pytest, e.g. `bash tests/run.sh -m unit` for the fast layer alone.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

need_apt=()
command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)  # javac: the Parallel Consumer bench harness
command -v mvn >/dev/null || need_apt+=(maven)
command -v prometheus >/dev/null || need_apt+=(prometheus)
# The container tests (tests/testing/): a private Docker engine and a locally built image.
command -v dockerd >/dev/null || need_apt+=(docker.io)
command -v debootstrap >/dev/null || need_apt+=(debootstrap)
if ((${#need_apt[@]})); then
  echo "== installing Debian packages: ${need_apt[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if [[ -z "${VIRTUAL_ENV:-}" ]]; then
  [[ -x .venv/bin/python ]] || python3 -m venv .venv
  # shellcheck disable=SC1091
  source .venv/bin/activate
fi
echo "== installing keyshared with its dev extras into ${VIRTUAL_ENV}"
python -m pip install -q --upgrade pip
python -m pip install -q -e '.[dev]'

echo "== fetching the Kafka and ZooKeeper jars (cached outside the repo)"
keyshared dev fetch

# About 40 s from warm pip and Maven caches, seconds once installed: the bench peers'
# integration test (tests/bench/test_bench_peers.py) and `bench --quick` race them.
echo "== installing the bench peers (Parallel Consumer, pyrallel-consumer, quixstreams; cached)"
keyshared bench --install-peers

# matplotlib builds its font cache on first use by running `fc-list`; a unit test that draws a
# bench chart must not be the first user on a fresh machine (a unit test may start no process).
python -c "import matplotlib.font_manager" >/dev/null

echo "== ruff"
ruff check .
echo "== mypy"
mypy

# A private engine (no default bridge: host networking on 127.0.0.1 only) for the container
# tests, stopped on every exit. Needs root; elsewhere those tests skip. The image is built from
# the cached root file system (5-9 s) or from nothing (debootstrap, 65-70 s); docs/local-cluster.md.
if [[ $(id -u) == 0 && -z "${KEYSHARED_NO_DOCKER:-}" ]]; then
  engine_dir=$(mktemp -d /tmp/keyshared-docker.XXXXXX)
  trap 'bash tests/docker_engine.sh stop "$engine_dir"; rm -rf "$engine_dir"' EXIT
  echo "== starting a Docker engine in ${engine_dir}"
  eval "$(bash tests/docker_engine.sh start "$engine_dir")"
  export DOCKER_HOST KEYSHARED_REQUIRE_DOCKER=1
  echo "== building the Kafka + ZooKeeper image (keyshared dev image)"
  SECONDS=0
  keyshared dev image >/dev/null
  echo "   image ready in ${SECONDS} s"
fi

echo "== pytest"
python -m pytest --durations=40 "$@"
