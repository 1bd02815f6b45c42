package kubesource

import (
	"slices"
)

// sameSlim reports whether two versions of an object carry the same fields
// the mappings read, so that an update of anything else (a Node heartbeat,
// a label or annotation, managedFields, a status field the transforms
// drop) costs this comparison and nothing more. Objects of different
// kinds, or kinds it does not know, are not the same.
func sameSlim(old, cur any) bool {
	switch o := old.(type) {
	case *kService:
		c, ok := cur.(*kService)
		return ok && o.Name == c.Name && o.Namespace == c.Namespace && o.skip == c.skip && o.selector == c.selector &&
			slices.Equal(o.nodePorts, c.nodePorts) && o.svc.Equal(&c.svc)
	case *kSlice:
		c, ok := cur.(*kSlice)
		return ok && o.Name == c.Name && o.Namespace == c.Namespace && o.skip == c.skip && o.sl.Equal(&c.sl)
	case *kNode:
		c, ok := cur.(*kNode)
		return ok && o.Name == c.Name && o.readyFalse == c.readyFalse && o.addresses == c.addresses
	case *kImport:
		c, ok := cur.(*kImport)
		return ok && o.Name == c.Name && o.Namespace == c.Namespace && o.skip == c.skip && o.svc.Equal(&c.svc)
	case *kNamespace:
		c, ok := cur.(*kNamespace)
		return ok && o.Name == c.Name
	}
	return false
}
