#!/usr/bin/env bash
# build.sh OUT — build the static meshdns binary (CGO_ENABLED=0) into OUT,
# stamping the meshdns version from `git describe`.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-bin/meshdns}
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
mkdir -p "$(dirname "$out")"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$out" .
echo "built $out ($version)"
