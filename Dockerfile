# syntax=docker/dockerfile:1
# Build wheels in one stage, install them into a slim runtime as a non-root user.
# The default target is the service (ingest, worker, xid-log, backtest with its HTML
# report, hence matplotlib: the plot extra), its wheel built without streams/lab
# (simulator, evaluation, demo, launchers): PEERWATCH_SERVICE_ONLY=1, setup.py.
# `--target lab` adds the lab (the compose stack's simulator uses it).
FROM python:3.11-slim AS build
# The compiled remote_write decoder (native/, built into peerwatch's wheel by
# setuptools-rust) needs Rust and a C linker, in this stage only.
COPY --from=rust:1-slim /usr/local/cargo /usr/local/cargo
COPY --from=rust:1-slim /usr/local/rustup /usr/local/rustup
ENV CARGO_HOME=/usr/local/cargo RUSTUP_HOME=/usr/local/rustup PATH=/usr/local/cargo/bin:$PATH
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY streams ./streams
COPY detectors ./detectors
COPY native ./native
COPY scripts/build-service-wheels ./scripts/
RUN scripts/build-service-wheels /wheels '[plot]' \
    && pip wheel --no-cache-dir --no-deps --wheel-dir /lab-wheels .

FROM python:3.11-slim AS runtime
# its datadir (the worker's tables, the ingest's write-ahead log by default) exists and is
# its own, so a volume mounted there starts out writable by it
RUN useradd --system --uid 10001 --home-dir /var/lib/peerwatch --create-home peerwatch \
    && install -d -o peerwatch -g peerwatch /var/lib/peerwatch/data
COPY --from=build /wheels /wheels
# rocksdb:// (the Kubernetes manifests' store) needs rocksdict's binary wheel to load
# here (glibc >= 2.28, libstdc++): fail the build, not the worker's first start
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && python -c "import rocksdict"
USER peerwatch
WORKDIR /var/lib/peerwatch
ENV PEERWATCH_DATADIR=/var/lib/peerwatch/data \
    PEERWATCH_INGEST_HOST=0.0.0.0 \
    PEERWATCH_WORKER_WEB_HOST=0.0.0.0
EXPOSE 9201 6066
ENTRYPOINT ["peerwatch"]
CMD ["--help"]

# the service with the lab beside it: peerwatch simulate / evaluate / demo
FROM runtime AS lab
COPY --from=build /lab-wheels /lab-wheels
USER root
RUN pip install --no-cache-dir --no-deps --force-reinstall /lab-wheels/*.whl && rm -rf /lab-wheels
USER peerwatch

# the default target: the service alone
FROM runtime AS service
