package clustergen

import (
	"math/rand"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// Step makes one random valid change to c and returns it. The change is
// one the API server accepts as an update of the object's last version:
// Services and slices are added, updated and deleted (a deleted Service's
// slices stay until steps of their own delete them, as with a Service
// deleted while its EndpointSlices are being collected); with Pods, a
// quarter of the steps change Pods (podStep), with Imports a quarter of
// the others change ServiceImports and their slices (importStep);
// namespaces are
// only added — a real API server keeps a deleted namespace Terminating
// until a namespace controller empties it.
func (c *Cluster) Step(r *rand.Rand) Change {
	if c.cfg.Pods > 0 && r.Intn(4) == 0 {
		return c.podStep(r)
	}
	if c.cfg.Imports > 0 && r.Intn(4) == 0 {
		return c.importStep(r) // only with imports: a seed without keeps its draws
	}
	for {
		switch n := r.Intn(100); {
		case n < 4:
			ns := c.newNamespace(r)
			c.Namespaces = append(c.Namespaces, ns)
			return Change{Add, ns.DeepCopy()}
		case n < 14:
			svc := c.newService(r, c.pickNamespace(r))
			c.Services = append(c.Services, svc)
			return Change{Add, svc.DeepCopy()}
		case n < 30 && len(c.Services) > 0:
			i := r.Intn(len(c.Services))
			c.Services[i] = c.updatedService(r, c.Services[i])
			return Change{Update, c.Services[i].DeepCopy()}
		case n < 36 && len(c.Services) > 1:
			return Change{Delete, c.deleteService(r.Intn(len(c.Services)))}
		case n < 56:
			sl := c.addSlice(r)
			return Change{Add, sl.DeepCopy()}
		case n < 92 && len(c.Slices) > 0:
			i := r.Intn(len(c.Slices))
			c.Slices[i] = c.updatedSlice(r, c.Slices[i])
			return Change{Update, c.Slices[i].DeepCopy()}
		case n >= 92 && len(c.Slices) > 0:
			return Change{Delete, c.deleteSlice(r.Intn(len(c.Slices)))}
		}
	}
}

// addSlice adds a slice for a Service of the cluster, mostly, or for one
// that does not exist.
func (c *Cluster) addSlice(r *rand.Rand) *discoveryv1.EndpointSlice {
	var sl *discoveryv1.EndpointSlice
	if len(c.Services) == 0 || r.Intn(10) == 0 {
		ns := c.pickNamespace(r)
		sl = c.newSlice(r, ns, c.uniqueName("service", ns, "ghost"), nil)
	} else {
		svc := c.Services[r.Intn(len(c.Services))]
		sl = c.newSlice(r, svc.Namespace, svc.Name, svc)
	}
	c.Slices = append(c.Slices, sl)
	return sl
}

// deleteService removes c.Services[i] and returns a copy of it.
func (c *Cluster) deleteService(i int) *corev1.Service {
	s := c.Services[i]
	c.Services = append(c.Services[:i:i], c.Services[i+1:]...)
	c.gone = append(c.gone, gone{s.Namespace, s.Name})
	return s.DeepCopy()
}

// deleteSlice removes c.Slices[i] and returns a copy of it.
func (c *Cluster) deleteSlice(i int) *discoveryv1.EndpointSlice {
	sl := c.Slices[i]
	c.Slices = append(c.Slices[:i:i], c.Slices[i+1:]...)
	return sl.DeepCopy()
}
