package kubesource

import (
	"google.golang.org/protobuf/encoding/protowire"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// The slim decoder's Services and Nodes (slimdecode.go).
var (
	slimServiceKind = newSlimKind(corev1.SchemeGroupVersion.WithKind("Service"), func(b []byte) (runtime.Object, error) { return parseService(b) })
	slimNodeKind    = newSlimKind(corev1.SchemeGroupVersion.WithKind("Node"), func(b []byte) (runtime.Object, error) { return parseNode(b) })
)

// parseService reads a Service: metadata (1), spec (2), status (3).
func parseService(b []byte) (*corev1.Service, error) {
	s := &corev1.Service{}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return wrongType(num <= 3)
		}
		switch num {
		case 1:
			return parseMeta(v, &s.ObjectMeta)
		case 2:
			return parseServiceSpec(v, &s.Spec)
		case 3:
			return parseServiceStatus(v, &s.Status)
		}
		return nil
	})
	return s, err
}

// parseServiceSpec reads what transformService reads: ports (1),
// selector (2), clusterIP (3), type (4), externalIPs (5), externalName
// (10), publishNotReadyAddresses (13), clusterIPs (18).
func parseServiceSpec(b []byte, spec *corev1.ServiceSpec) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1:
			if typ != protowire.BytesType {
				return errNotSlim
			}
			var p corev1.ServicePort
			err := parseServicePort(v, &p)
			spec.Ports = append(spec.Ports, p)
			return err
		case 2:
			return mapEntry(typ, v, &spec.Selector)
		case 3:
			return str(typ, v, &spec.ClusterIP)
		case 4:
			var t string
			err := str(typ, v, &t)
			spec.Type = corev1.ServiceType(t)
			return err
		case 5:
			var ip string
			err := str(typ, v, &ip)
			spec.ExternalIPs = append(spec.ExternalIPs, ip)
			return err
		case 10:
			return str(typ, v, &spec.ExternalName)
		case 13:
			return varintBool(typ, x, &spec.PublishNotReadyAddresses)
		case 18:
			var ip string
			err := str(typ, v, &ip)
			spec.ClusterIPs = append(spec.ClusterIPs, ip)
			return err
		}
		return nil
	})
}

// parseServicePort reads name (1), protocol (2), port (3), nodePort (5);
// not targetPort (4), appProtocol (6).
func parseServicePort(b []byte, p *corev1.ServicePort) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		switch num {
		case 1:
			return str(typ, v, &p.Name)
		case 2:
			var s string
			err := str(typ, v, &s)
			p.Protocol = corev1.Protocol(s)
			return err
		case 3:
			return varint32(typ, x, &p.Port)
		case 5:
			return varint32(typ, x, &p.NodePort)
		}
		return nil
	})
}

// parseServiceStatus reads loadBalancer (1): its ingress (1), each with
// ip (1) and hostname (2); not the conditions (2).
func parseServiceStatus(b []byte, st *corev1.ServiceStatus) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != 1 {
			return nil
		}
		if typ != protowire.BytesType {
			return errNotSlim
		}
		return fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			if num != 1 {
				return nil
			}
			if typ != protowire.BytesType {
				return errNotSlim
			}
			var in corev1.LoadBalancerIngress
			err := fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				switch num {
				case 1:
					return str(typ, v, &in.IP)
				case 2:
					return str(typ, v, &in.Hostname)
				}
				return nil
			})
			st.LoadBalancer.Ingress = append(st.LoadBalancer.Ingress, in)
			return err
		})
	})
}

// parseNode reads a Node: metadata (1), status (3: conditions 4, each
// with type 1 and status 2; addresses 5, each with type 1 and address 2);
// not its spec (2), nor the rest of its status (capacity, images, ...).
func parseNode(b []byte) (*corev1.Node, error) {
	n := &corev1.Node{}
	err := fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch num {
		case 1:
			if typ != protowire.BytesType {
				return errNotSlim
			}
			return parseMeta(v, &n.ObjectMeta)
		case 3:
			if typ != protowire.BytesType {
				return errNotSlim
			}
			return fields(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != 4 && num != 5 {
					return nil
				}
				k, val, err := pairField(typ, v) // type and status, or type and address
				if err != nil {
					return err // the object goes to client-go's decoder whole
				}
				kind, value := string(k), string(val)
				if num == 4 {
					n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeConditionType(kind), Status: corev1.ConditionStatus(value)})
				} else {
					n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeAddressType(kind), Address: value})
				}
				return nil
			})
		}
		return nil
	})
	return n, err
}
