# syntax=docker/dockerfile:1.7
# Sandpool operator: static (musl) binaries on distroless/static, running as nonroot: the
# operator, and beside it /sandpool-gateway, which the operator runs as each pool's gateway
# (its default --gateway-image is this image).
# Build from the repository root:
#   docker buildx build -f docker/operator.Dockerfile -t ghcr.io/sandpool/operator:0.1.0 .
# Multi-arch: add --platform linux/amd64,linux/arm64 (each platform builds natively).

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    target="$(uname -m)-unknown-linux-musl" \
    && rustup target add "$target" \
    && cargo build --release --locked -p sandpool-operator -p sandpool-gateway --target "$target" \
    && install -D -m 0755 "target/$target/release/sandpool-operator" /out/sandpool-operator \
    && install -D -m 0755 "target/$target/release/sandpool-gateway" /out/sandpool-gateway

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sandpool-operator /sandpool-operator
COPY --from=build /out/sandpool-gateway /sandpool-gateway
USER 65532:65532
EXPOSE 8081
ENTRYPOINT ["/sandpool-operator"]
CMD ["run"]
