# syntax=docker/dockerfile:1
# Multi-stage build: static worker, producer and stockctl binaries on a distroless base (about 40 MB).
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY lockmw/rlock/go.mod lockmw/rlock/go.sum ./lockmw/rlock/
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/worker ./cmd/worker && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/producer ./cmd/producer && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/stockctl ./cmd/stockctl

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /out/producer /out/stockctl /usr/local/bin/
USER nonroot:nonroot
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/worker"]
