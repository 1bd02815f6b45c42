#!/usr/bin/env bash
# lint.sh [fmt] — gofmt and go vet over the whole module; fails on any
# finding. `lint.sh fmt` checks gofmt only: `make test` runs go vet's full
# set of analyzers inside its `go test -race -vet=all` instead, on the
# packages the race build has already compiled, rather than compiling the
# whole module a second time without -race just for vet.
set -euo pipefail
cd "$(dirname "$0")/.."
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:"; echo "$unformatted"; exit 1
fi
if [ "${1:-}" = fmt ]; then
  echo "gofmt ok"
  exit 0
fi
go vet ./...
echo "lint ok"
