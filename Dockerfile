# The haptor controller image: `haptor run` (the default command) with the haproxy binary
# it validates every render with (`haproxy -c`). haptor checks a render only with a haproxy
# of the HAProxy line the pods run, so the runtime stage's Debian suite is chosen by that
# line: forky (Debian 14, testing; the only Debian suite with HAProxy 3.2) for the chart's
# default pods (haproxytech/haproxy-debian:3.2.22, HAProxy 3.2 with Data Plane API 3.2),
# trixie for pods on HAProxy 3.0, bookworm for pods on 2.6:
#
#   docker build -t haptor:dev .                                          # checker 3.2
#   docker build --build-arg DEBIAN_SUITE=bookworm -t haptor:dev-2.6 .    # checker 2.6
#
# tests/processes/dockerfile.rs checks this file's shape (stages, pinned bases, non-root user, exec
# form entrypoint, --locked build). scripts/build-image builds the same image from the runtime
# stage below without a container engine (it carries out FROM, RUN, COPY, ARG, LABEL, ENV,
# EXPOSE, USER, ENTRYPOINT and CMD; another instruction there must be taught to it).

# The Debian suite of the runtime stage: its haproxy is the checker (see above).
ARG DEBIAN_SUITE=forky

# Builder: the toolchain of Cargo.toml's rust-version. Its glibc (bookworm's 2.36) is no
# newer than any runtime suite's, so the binary runs on each.
FROM rust:1.89-bookworm AS builder
WORKDIR /build

# Dependencies first, in a layer of their own: it is rebuilt only when Cargo.toml or
# Cargo.lock change. The manifest names bench and test targets explicitly, so each gets a
# stub, their names read from the manifest itself (a `name = ` line right after each
# `[[bench]]` and `[[test]]`); the stubs are removed again before the sources are copied.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src benches tests \
    && echo 'fn main() {}' > src/main.rs \
    && touch src/lib.rs \
    && for bench in $(sed -n '/^\[\[bench\]\]/{n;s/^name = "\(.*\)"$/\1/p;}' Cargo.toml); do echo 'fn main() {}' > "benches/$bench.rs"; done \
    && for test in $(sed -n '/^\[\[test\]\]/{n;s/^name = "\(.*\)"$/\1/p;}' Cargo.toml); do mkdir -p "tests/$test" && touch "tests/$test/main.rs"; done \
    && cargo build --release --locked \
    && rm -rf src benches tests

# The sources. COPY keeps the files' modification times, which may be older than the stub
# build's outputs: touching the crate roots makes cargo rebuild haptor itself.
# build.rs records the commit for `haptor version`; the context has no .git, so it comes
# from the build argument: docker build --build-arg HAPTOR_GIT_COMMIT=$(git rev-parse --short=12 HEAD)
ARG HAPTOR_GIT_COMMIT=""
COPY build.rs ./
COPY src ./src
COPY benches ./benches
COPY tests ./tests
COPY deploy ./deploy
RUN touch src/main.rs src/lib.rs \
    && cargo build --release --locked \
    && ./target/release/haptor version

# Runtime: haproxy (the `haproxy -c` checker, of the suite's HAProxy line) and the CA
# certificates the Kubernetes and Data Plane API clients trust; nothing else.
FROM debian:${DEBIAN_SUITE}-slim AS runtime

ARG DEBIAN_SUITE
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="haptor" \
      org.opencontainers.image.description="A Kubernetes ingress controller for HAProxy, built as a tree of supervised ractor actors" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="haptor" \
      org.opencontainers.image.base.name="docker.io/library/debian:${DEBIAN_SUITE}-slim"

RUN apt-get update \
    && apt-get install -y --no-install-recommends haproxy ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 65532 haptor \
    && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin haptor \
    && haproxy -v

COPY --from=builder /build/target/release/haptor /usr/local/bin/haptor

# `haptor run` checks renders with this binary (also its default when it is not on PATH).
ENV HAPROXY_BIN=/usr/sbin/haproxy

# Probes (/healthz, /readyz) and Prometheus metrics (haptor run's --health-addr and
# --metrics-addr defaults); the debug endpoints stay on localhost.
EXPOSE 8081 9090

USER 65532:65532
ENTRYPOINT ["/usr/local/bin/haptor"]
CMD ["run"]
