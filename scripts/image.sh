#!/usr/bin/env bash
# Builds the container image from container/Containerfile (FROM scratch) with buildah, without a
# Docker engine. `make image` runs it after `make static`.
#
#   scripts/image.sh [STATIC_BINARY]     (default bin/static/cdc)
#
# IMAGE names the image (default tidemark/cdc; podman and buildah store it as
# localhost/tidemark/cdc:latest). IMAGE_FORMAT is oci (default) or docker: the OCI image format
# has no health check, so buildah drops the Containerfile's HEALTHCHECK there; docker format
# keeps it (podman then runs it, e.g. `podman healthcheck run`).
# CA_BUNDLE is the CA certificates file copied in (default: Debian's ca-certificates bundle).
set -euo pipefail
cd "$(dirname "$0")/.."

bin="${1:-bin/static/cdc}"
image="${IMAGE:-tidemark/cdc}"
format="${IMAGE_FORMAT:-oci}"
ca="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

die() { echo "image: $*" >&2; exit 1; }

command -v buildah >/dev/null 2>&1 ||
	die "buildah not found: apt-get install buildah (Debian), or build ./Dockerfile with Docker (make docker)"
[ -x "$bin" ] || die "$bin not found: run make static first"
[ -r "$ca" ] || die "CA certificates $ca not found: apt-get install ca-certificates, or set CA_BUNDLE"
case "$format" in
oci | docker) ;;
*) die "IMAGE_FORMAT is $format: want oci or docker" ;;
esac
# A static binary has no program interpreter; a dynamically linked one would not start on an
# empty base.
if command -v readelf >/dev/null 2>&1 && readelf -l "$bin" | grep -q 'program interpreter'; then
	die "$bin is dynamically linked: build it with CGO_ENABLED=0 (make static)"
fi

ctx="$(mktemp -d)"
trap 'rm -rf "$ctx"' EXIT
install -m 0755 "$bin" "$ctx/cdc"
install -d -m 0755 "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/home"
install -m 0644 container/passwd container/group "$ctx/rootfs/etc/"
install -m 0644 "$ca" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
install -d -m 1777 "$ctx/rootfs/tmp"
install -d -m 0700 "$ctx/home/nonroot"
chmod 0755 "$ctx" "$ctx/rootfs"

buildah build --quiet --format "$format" -f container/Containerfile -t "$image" "$ctx" >/dev/null
echo "image: built $image ($format format)" >&2
