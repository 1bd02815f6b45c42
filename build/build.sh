#!/usr/bin/env bash
# build.sh OUT — build the static meshdns binary (CGO_ENABLED=0) into OUT,
# stamping the meshdns version: the release tag when HEAD carries one
# (vX.Y.Z, which must equal VERSION), else VERSION with the commit.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin/meshdns}
version=$(git describe --tags --exact-match --dirty 2>/dev/null || echo "v$(cat VERSION)-$(git describe --always --dirty 2>/dev/null || echo dev)")
mkdir -p "$(dirname "$out")"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$out" .
echo "built $out ($version)"
