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
# The packages: docker/executor-packages.txt, one tier per line (slim: Python and C/C++;
# full: the rest of executor/languages.toml). This image installs every tier;
# scripts/images.sh builds the same list offline (--full) or only the slim tier (default).
RUN --mount=type=bind,source=docker/executor-packages.txt,target=/tmp/executor-packages.txt \
    apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        $(awk '!/^#/ && NF { for (i = 2; i <= NF; i++) print $i }' /tmp/executor-packages.txt) \
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
