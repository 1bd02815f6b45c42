# meshdns — see README.md. Anything longer than a line lives in build/.
GO      ?= go
BIN     := bin/meshdns

.PHONY: build run test bench lint deps image clean

build:
	build/build.sh $(BIN)

run: build
	$(BIN)

deps:
	build/install-deps.sh
	build/peer-tools.sh consul kube-apiserver etcd

lint:
	build/lint.sh

test: deps lint build
	MESHDNS_BIN=$(CURDIR)/$(BIN) $(GO) test -race -timeout 60m -count=1 ./...
# (then internal/startpages once more as a position-independent
# executable: its relocated RELRO pages must survive the release)
	$(GO) test -count=1 -buildmode=pie ./internal/startpages

image: build
	build/image.sh prebuilt

bench: deps build
	build/bench.sh

clean:
	rm -rf bin
