# meshdns — see README.md. Anything longer than a line lives in build/.
GO      ?= go
BIN     := bin/meshdns

.PHONY: build run test bench fleet soak drill lint deps image clean

build:
	build/build.sh $(BIN)

run: build
	$(BIN)

# the real peers built from Go modules (build/peer-tools.sh)
PEERS   := consul kube-apiserver etcd coredns kubelet kube-proxy kube-controller-manager kube-scheduler kubectl helm

deps:
	build/install-deps.sh
	build/peer-tools.sh $(PEERS)

lint:
	build/lint.sh

# go vet's analyzers run inside the race build (-vet=all): one compile of the
# module for both, where `make lint` compiles it once more without -race.
# The peers build in the background while the binary, the race build and
# the tests that need no peer run; every fuzz target runs 10 s (its seed
# corpus also runs in go test), niced, beside the tests (build/test.sh says
# why); `make soak` fuzzes each for five minutes.
test:
	build/install-deps.sh
	MESHDNS_BIN=$(CURDIR)/$(BIN) PEERS="$(PEERS)" build/test.sh 10

image: build
	build/image.sh prebuilt

bench: deps build
	build/bench.sh

# the simulated node-local fleet alone (build/bench.sh runs it too):
# BENCH_FOLLOWERS=1000 make fleet for a thousand followers
fleet: deps build
	build/bench-fleet.sh

soak: deps build
	build/soak.sh

# every drill of the one-node cluster (~25 min): docs/cluster-dns.md
drill: deps build
	MESHDNS_BIN=$(CURDIR)/$(BIN) $(GO) test -tags nodedrill -timeout 60m -count=1 -v -run 'TestNodeDrill|TestNodeLocalDrills' ./test/

clean:
	rm -rf bin
