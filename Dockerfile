# syntax=docker/dockerfile:1
# Static binaries (CGO_ENABLED=0, -trimpath, -s -w) on distroless/static-debian12:nonroot (about 2 MB:
# CA certificates, tzdata, /etc/passwd; no shell). The production image (the last stage, built by default)
# holds the worker (27.6 MB) and stockctl (9.3 MB): about 39 MB uncompressed. The load producer (27.4 MB) is
# the target "producer", an image of its own (about 29 MB). Binaries measured on linux/amd64 at 0.1.0.
#   docker build --build-arg COMMIT=$(git rev-parse HEAD) -t stockflow .
#   docker build --build-arg COMMIT=$(git rev-parse HEAD) --target producer -t stockflow-producer .
# scripts/build.sh is the one build command, here and outside Docker. VERSION is the newest release in
# CHANGELOG.md, with -dev between releases (while its [Unreleased] section lists changes; a test holds them
# equal): build.sh stamps 0.1.0-dev+<COMMIT> into the binaries, and the images' version label says 0.1.0-dev.
# A release build passes --build-arg VERSION=x.y.z. COMMIT has no default that could be true: .git is not
# in the build context (.dockerignore).
ARG VERSION=0.1.0-dev
ARG COMMIT=unknown

FROM golang:1.26-bookworm AS build
ARG VERSION
ARG COMMIT
WORKDIR /src
COPY go.mod go.sum ./
COPY lockmw/rlock/go.mod lockmw/rlock/go.sum ./lockmw/rlock/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    VERSION="$VERSION" COMMIT="$COMMIT" scripts/build.sh /out worker stockctl producer

# The load producer, for compose.yaml and load tests: not in the production image.
FROM gcr.io/distroless/static-debian12:nonroot AS producer
ARG VERSION
ARG COMMIT
LABEL org.opencontainers.image.title="stockflow-producer" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$COMMIT" \
      org.opencontainers.image.source="https://github.com/stockflow/stockflow" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/producer /usr/local/bin/
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/producer"]

FROM gcr.io/distroless/static-debian12:nonroot AS production
ARG VERSION
ARG COMMIT
LABEL org.opencontainers.image.title="stockflow" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$COMMIT" \
      org.opencontainers.image.source="https://github.com/stockflow/stockflow" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/worker /out/stockctl /usr/local/bin/
USER nonroot:nonroot
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/worker"]
