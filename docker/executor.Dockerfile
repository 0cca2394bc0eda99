# syntax=docker/dockerfile:1.7
# Sandpool executor: Debian bookworm with every toolchain of the language table
# (executor/languages.toml), a non-root user, the executor as entrypoint.
# Build from the repository root:
#   docker buildx build -f docker/executor.Dockerfile -t ghcr.io/sandpool/executor:0.1.0 .

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p sandpool-executor \
    && install -D -m 0755 target/release/sandpool-executor /out/sandpool-executor

FROM debian:${DEBIAN_RELEASE}-slim
# One package set per language of executor/languages.toml; keep the two in step.
# Not in bookworm: julia (no Debian package). kotlin is 1.3, scala 2.11, rustc 1.63,
# golang-go 1.19, node-typescript 4.8: the versions bookworm ships.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates tini \
        bash \
        python3 python3-pytest \
        python3-numpy python3-pandas python3-scipy python3-sympy python3-networkx \
        python3-sortedcontainers python3-regex \
        gcc g++ libboost-dev libssl-dev \
        openjdk-17-jdk-headless junit4 \
        nodejs npm node-typescript \
        golang-go golang-github-stretchr-testify-dev \
        rustc \
        ruby \
        php-cli \
        perl \
        lua5.4 \
        r-base-core \
        scala \
        kotlin \
        mono-mcs mono-runtime \
        gdc \
        racket \
        iverilog \
        sqlite3 \
    && rm -rf /var/lib/apt/lists/*

# npm packages benchmark test harnesses require (the javascript and typescript entries'
# import_dirs in executor/languages.toml; docs/benchmarks.md): MBXP's lodash, HumanEval-X's js-md5.
RUN npm install --prefix /opt/sandpool/node --no-audit --no-fund --omit=dev lodash@4 js-md5@0.8 \
    && rm -rf /root/.npm

# The default identity is unprivileged. Pools in "namespaces" mode run the container as
# uid 0 with a handful of capabilities (set by the operator) so the executor can give
# each run its own namespaces and uid; "restricted" pools run as this user.
RUN groupadd --gid 65532 sandpool \
    && useradd --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin sandpool \
    && install -d -o 65532 -g 65532 -m 0750 /var/lib/sandpool

COPY --from=build /out/sandpool-executor /usr/local/bin/sandpool-executor

USER 65532:65532
ENV SANDPOOL_WORK_ROOT=/var/lib/sandpool
EXPOSE 50051 8080 9090
# tini as PID 1 forwards SIGTERM (the executor drains) and reaps orphaned processes.
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/sandpool-executor"]
