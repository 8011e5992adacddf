#!/bin/sh
# Builds the dhp image from this checkout and runs its smoke test (smoke.sh: a controller, a
# worker with 2 CPU slots and a 20-step tiny job, inside the image).
#   deploy/container/test-image.sh [docker|podman] [image-tag]
# The smoke test runs as a build step of a throwaway image on top of dhp, not with `run`: that
# needs no privileges beyond building, so it works where the engine cannot start containers
# (rootless sandboxes; podman with --isolation chroot). Extra build flags: DHP_BUILD_FLAGS.
set -eu
cd "$(dirname "$0")/../.."
engine=${1:-docker}
tag=${2:-dhp:test}
ignore=""
# Docker (BuildKit) reads Dockerfile.dockerignore beside the Dockerfile; podman is told.
[ "$engine" = podman ] && ignore="--ignorefile deploy/container/Dockerfile.dockerignore"
# shellcheck disable=SC2086
"$engine" build ${DHP_BUILD_FLAGS:-} $ignore -f deploy/container/Dockerfile -t "$tag" .
smoke=$(mktemp -d)
trap 'rm -rf "$smoke"' EXIT
printf 'FROM %s\nRUN /usr/share/dhp/smoke.sh\n' "$tag" >"$smoke/Containerfile"
# shellcheck disable=SC2086
"$engine" build ${DHP_BUILD_FLAGS:-} --no-cache -f "$smoke/Containerfile" "$smoke"
echo "image $tag OK"
