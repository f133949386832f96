# syntax=docker/dockerfile:1
# Tidemark cdc: a static binary on a distroless, non-root base.
#   docker build -t tidemark/cdc .

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags='-s -w' -o /cdc ./cmd/cdc

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /cdc /cdc
# uid/gid 65532; /tmp (the default hold-buffer spill folder) is writable.
USER nonroot:nonroot
# The HTTP endpoints (/healthz, /readyz, /exports, /metrics); the health check asks /healthz.
# Inside the container they listen on every interface: Kubernetes probes come from the kubelet
# to the pod's IP. They show no row data and change nothing without CDC_HTTP_TOKEN (the admin
# endpoints are off until it is set); keep the port private anyway (README, Production).
ENV CDC_HTTP_ADDR=0.0.0.0:9187
EXPOSE 9187
HEALTHCHECK --interval=10s --timeout=6s --start-period=30s --retries=3 CMD ["/cdc", "health"]
ENTRYPOINT ["/cdc"]
