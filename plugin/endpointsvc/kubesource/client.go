package kubesource

import "k8s.io/client-go/kubernetes"

// ClientFor returns a client with the source's settings (kubeconfig and
// context, or the in-cluster configuration; protobuf), for what runs
// beside the source on the same API server (endpointsvc's publish).
func ClientFor(cfg Config) (kubernetes.Interface, error) {
	return (&Source{cfg: cfg}).client()
}
