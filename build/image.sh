#!/usr/bin/env bash
# image.sh [prebuilt|builder] — build the meshdns container image from
# images/Dockerfile (called by `make image`).
#   prebuilt (default)  FROM scratch with the static binary of `make build`;
#                       needs no registry. The binary is $MESHDNS_BIN when set,
#                       else bin/meshdns (built first when missing).
#   builder             compiles in $GO_IMAGE (default golang:1.26); needs a
#                       registry or that image present.
# IMAGE names the tag (default meshdns:latest). DOCKER_HOST and the other
# DOCKER_* variables pick the engine as for the docker CLI. Without the
# buildx plugin the classic builder is used (DOCKER_BUILDKIT=0).
set -euo pipefail
cd "$(dirname "$0")/.."
variant=${1:-prebuilt}
image=${IMAGE:-meshdns:latest}
if [ -z "${DOCKER_BUILDKIT:-}" ] && ! docker buildx version >/dev/null 2>&1; then
  export DOCKER_BUILDKIT=0
fi
case $variant in
  prebuilt)
    # A context of its own: the binary, the Dockerfile and the image's files.
    ctx=$(mktemp -d)
    trap 'rm -rf "$ctx"' EXIT
    bin=${MESHDNS_BIN:-bin/meshdns}
    [ -x "$bin" ] || build/build.sh "$bin"
    mkdir -p "$ctx/bin" "$ctx/images"
    cp "$bin" "$ctx/bin/meshdns"
    cp -r images/Dockerfile images/Corefile images/data "$ctx/images/"
    docker build -q -f "$ctx/images/Dockerfile" --target prebuilt -t "$image" "$ctx"
    ;;
  builder)
    # The classic builder builds every stage up to the target, the prebuilt
    # one (which copies bin/meshdns) included; BuildKit skips it.
    if [ "${DOCKER_BUILDKIT:-1}" = 0 ] && [ ! -f bin/meshdns ]; then
      echo "image.sh: the classic builder needs bin/meshdns for the builder variant too (make build), or install docker buildx" >&2
      exit 1
    fi
    docker build -f images/Dockerfile --target builder \
      --build-arg GO_IMAGE="${GO_IMAGE:-golang:1.26}" -t "$image" .
    ;;
  *) echo "image.sh: unknown variant $variant (prebuilt or builder)" >&2; exit 2 ;;
esac
echo "image $image ($variant)"
