package kubesource

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	mcsapi "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// protobufInfo is client-go's protobuf serializer.
func protobufInfo(t testing.TB) runtime.SerializerInfo {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	return info
}

// encode is obj as the API server sends it in protobuf, in group version gv.
func encode(t testing.TB, obj runtime.Object, gv schema.GroupVersion) []byte {
	t.Helper()
	b, err := runtime.Encode(scheme.Codecs.EncoderForVersion(protobufInfo(t).Serializer, gv), obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// slimDecode decodes b as a watch client with the slim decoder of kinds does.
func slimDecode(t *testing.T, b []byte, gv schema.GroupVersion, kinds ...slimKind) runtime.Object {
	t.Helper()
	codecs := slimCodecs{rest.CodecFactoryForGeneratedClient(scheme.Scheme, scheme.Codecs).WithoutConversion(), kinds}
	info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	obj, err := runtime.Decode(codecs.DecoderToVersion(info.Serializer, gv), b)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// clientGoDecode decodes b as client-go does.
func clientGoDecode(t *testing.T, b []byte) runtime.Object {
	t.Helper()
	obj, _, err := protobufInfo(t).Serializer.Decode(b, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// sameMeta reports whether the informer reads the same metadata of a and b.
func sameMeta(a, b *metav1.ObjectMeta) bool {
	return a.Name == b.Name && a.Namespace == b.Namespace && a.ResourceVersion == b.ResourceVersion &&
		maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations)
}

// genSlice is a generated EndpointSlice with every field the API has,
// those the transform reads and those it drops, each present or absent:
// conditions, hostnames, names and ports unset, empty or set; addresses of
// its type and some that are not; trigger times valid and not.
func genSlice(rng *rand.Rand, i int) *discoveryv1.EndpointSlice {
	pick := func(n int) bool { return rng.Intn(n) == 0 }
	str := func(s string) *string {
		if pick(3) {
			return nil
		}
		if pick(4) {
			s = ""
		}
		return &s
	}
	boolp := func() *bool {
		if pick(3) {
			return nil
		}
		b := pick(2)
		return &b
	}
	types := []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6, discoveryv1.AddressTypeFQDN, "Bogus"}
	at := types[rng.Intn(len(types))]
	now := metav1.NewTime(time.Unix(1_700_000_000+int64(i), 0))
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("web-%d-x%d", i, rng.Intn(100)), Namespace: []string{"default", "shop", "Kube-System"}[rng.Intn(3)],
			GenerateName: "web-", UID: types2UID(rng), ResourceVersion: fmt.Sprint(rng.Intn(1e6)), Generation: int64(rng.Intn(9)),
			CreationTimestamp: now, Finalizers: []string{"f"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: types2UID(rng)}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "endpointslice-controller", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "discovery.k8s.io/v1", Time: &now, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:endpoints":{}}`)}}},
		},
		AddressType: at,
	}
	if !pick(5) {
		sl.Labels = map[string]string{discoveryv1.LabelServiceName: []string{"web", "api", ""}[rng.Intn(3)], "other": "x"}
		if pick(3) {
			sl.Labels[mcsapi.LabelServiceName], sl.Labels[mcsapi.LabelSourceCluster] = "web", "c1"
		}
	}
	if !pick(3) {
		sl.Annotations = map[string]string{"note": "y"}
		switch rng.Intn(4) {
		case 0:
			sl.Annotations[corev1.EndpointsLastChangeTriggerTime] = now.UTC().Format(time.RFC3339Nano)
		case 1:
			sl.Annotations[corev1.EndpointsLastChangeTriggerTime] = "yesterday"
		case 2:
			sl.Annotations[metav1.InitialEventsAnnotationKey] = []string{"true", "false"}[rng.Intn(2)]
		}
	}
	for j := range rng.Intn(6) {
		ep := discoveryv1.Endpoint{Hostname: str(fmt.Sprintf("h-%d", j)), NodeName: str(fmt.Sprintf("node-%d", rng.Intn(3))),
			Zone: str("z1"), Conditions: discoveryv1.EndpointConditions{Ready: boolp(), Serving: boolp(), Terminating: boolp()}}
		for k := range rng.Intn(4) { // none: not an endpoint DNS reads
			switch {
			case pick(8):
				ep.Addresses = append(ep.Addresses, "not an address")
			case at == discoveryv1.AddressTypeIPv6:
				ep.Addresses = append(ep.Addresses, fmt.Sprintf("fd00::%x:%x", j, k))
			case at == discoveryv1.AddressTypeFQDN:
				ep.Addresses = append(ep.Addresses, fmt.Sprintf("ep-%d-%d.example.com", j, k))
			default:
				ep.Addresses = append(ep.Addresses, fmt.Sprintf("10.1.%d.%d", j, k))
			}
		}
		if !pick(3) {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: sl.Namespace, Name: fmt.Sprintf("web-%d", j), UID: types2UID(rng)}
		}
		if pick(3) {
			ep.Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}}
			ep.DeprecatedTopology = map[string]string{"k": "v"}
		}
		sl.Endpoints = append(sl.Endpoints, ep)
	}
	for j := range rng.Intn(4) {
		p := discoveryv1.EndpointPort{Name: str(fmt.Sprintf("p%d", j)), AppProtocol: str("http")}
		if !pick(3) {
			proto := []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP, "QUIC"}[rng.Intn(4)]
			p.Protocol = &proto
		}
		if !pick(3) {
			port := int32(rng.Intn(70000))
			p.Port = &port
		}
		sl.Ports = append(sl.Ports, p)
	}
	return sl
}

func types2UID(rng *rand.Rand) types.UID { return types.UID(fmt.Sprintf("uid-%08x", rng.Uint32())) }

// TestSlimSliceAsClientGo: for generated EndpointSlices sent in protobuf,
// the slim decoder gives the kSlice that client-go's decoder and the
// transform give (with and without multicluster, with and without a
// namespace filter): the same slim slice, name, namespace,
// resourceVersion, trigger time and closing-bookmark mark - also once the
// event's bytes are overwritten, so that nothing it keeps points into
// them (the decoder reads them through views). Without it every event
// decoded every field, then the transform copied them again.
func TestSlimSliceAsClientGo(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	gv := discoveryv1.SchemeGroupVersion
	for i := range 400 {
		b := encode(t, genSlice(rng, i), gv)
		w := clientGoDecode(t, b).(*discoveryv1.EndpointSlice)
		got, ok := slimDecode(t, b, gv, slimSliceKind).(*kSlice)
		if !ok {
			t.Fatalf("slice %d: decoded a %T", i, got)
		}
		for j := range b {
			b[j] = 0xa5
		}
		if want := (kMeta{Name: w.Name, Namespace: w.Namespace, ResourceVersion: w.ResourceVersion}); got.kMeta != want {
			t.Fatalf("slice %d: metadata %+v, want %+v", i, got.kMeta, want)
		}
		if end := w.Annotations[metav1.InitialEventsAnnotationKey] == "true"; got.initialEventsEnd != end || (got.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true") != end {
			t.Fatalf("slice %d: closing bookmark %v, want %v", i, got.initialEventsEnd, end)
		}
		for _, mc := range []bool{false, true} {
			for _, nss := range []map[string]bool{nil, {"shop": true}} {
				if ka, ke, ok := transformedAlike(got, w, nss, mc); !ok {
					t.Fatalf("slice %d (mc %v, namespaces %v): transformed\n%+v\nwant\n%+v", i, mc, nss, ka, ke)
				}
			}
		}
	}
}

// transformedAlike transforms the slim decoder's kSlice (a copy: the
// transform may drop its multicluster labels) and client-go's object of
// the same slice alike, and reports whether the informer and the mappings
// read the two the same.
func transformedAlike(got *kSlice, w *discoveryv1.EndpointSlice, nss map[string]bool, mc bool) (slim, want *kSlice, ok bool) {
	c := *got
	a, _ := transformSlice(nss, mc)(&c)
	e, _ := transformSlice(nss, mc)(w)
	slim, want = a.(*kSlice), e.(*kSlice)
	return slim, want, sameSlim(slim, want) && slim.kMeta == want.kMeta && slim.trigger == want.trigger &&
		slim.sl.Import == want.sl.Import && slim.sl.Cluster == want.sl.Cluster && slices.Equal(slim.sl.Ports, want.sl.Ports)
}

// TestSlimDecoderPassesOthers: what is not of the decoder's kinds in
// protobuf (the Status of an ERROR event, a list, another kind, JSON) is
// decoded as client-go decodes it, a watch-list's closing bookmark keeps
// the annotation the informer waits for, and whatever part of a slice the
// slim decoder accepts, client-go reads alike.
func TestSlimDecoderPassesOthers(t *testing.T) {
	gv := discoveryv1.SchemeGroupVersion
	st := &metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old"}
	got, ok := slimDecode(t, encode(t, st, gv), gv, slimSliceKind).(*metav1.Status)
	if !ok || got.Code != 410 || got.Reason != metav1.StatusReasonExpired {
		t.Errorf("Status decoded as %#v", got)
	}
	list := &discoveryv1.EndpointSliceList{ListMeta: metav1.ListMeta{ResourceVersion: "5"}, Items: []discoveryv1.EndpointSlice{*genSlice(rand.New(rand.NewSource(2)), 0)}}
	if l, ok := slimDecode(t, encode(t, list, gv), gv, slimSliceKind).(*discoveryv1.EndpointSliceList); !ok || len(l.Items) != 1 || l.Items[0].ManagedFields == nil {
		t.Errorf("list decoded as %T, not as client-go decodes it", l)
	}
	svc := genService(rand.New(rand.NewSource(4)), 0)
	if s, ok := slimDecode(t, encode(t, svc, corev1.SchemeGroupVersion), corev1.SchemeGroupVersion, slimNodeKind).(*corev1.Service); !ok || s.ManagedFields == nil {
		t.Errorf("a kind the decoder does not read decoded as %T, not as client-go decodes it", s)
	}
	bm := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "77", Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	if b, ok := slimDecode(t, encode(t, bm, gv), gv, slimSliceKind).(*kSlice); !ok || b.ResourceVersion != "77" || b.GetAnnotations()[metav1.InitialEventsAnnotationKey] != "true" {
		t.Errorf("bookmark decoded as %#v", b)
	}
	// a slice the slim parse cannot read is client-go's, made a kSlice
	// alike (the informer expects no other type)
	unread := slimSliceKind
	unread.parse = func([]byte) (runtime.Object, error) { return nil, errNotSlim }
	for i := range 50 {
		want := genSlice(rand.New(rand.NewSource(int64(10+i))), i)
		if i == 0 {
			want.Annotations = map[string]string{metav1.InitialEventsAnnotationKey: "true"}
		}
		b := encode(t, want, gv)
		got, ok := slimDecode(t, b, gv, unread).(*kSlice)
		e, _ := transformSlice(nil, true)(clientGoDecode(t, b))
		if !ok || !sameSlim(got, e) || got.kMeta != e.(*kSlice).kMeta || got.initialEventsEnd != (want.Annotations[metav1.InitialEventsAnnotationKey] == "true") {
			t.Fatalf("slice %d read by client-go converted to %#v, want %#v", i, got, e)
		}
	}
	if _, _, ok := decodeSlim([]byte(`{"kind":"EndpointSlice","apiVersion":"discovery.k8s.io/v1"}`), []slimKind{slimSliceKind}); ok {
		t.Error("JSON read as protobuf")
	}
	b := encode(t, genSlice(rand.New(rand.NewSource(3)), 0), gv)
	for cut := len(protoPrefix); cut < len(b); cut++ {
		sl, _, ok := decodeSlim(b[:cut], []slimKind{slimSliceKind})
		if !ok {
			continue
		}
		want, _, err := protobufInfo(t).Serializer.Decode(b[:cut], nil, nil)
		if err != nil {
			t.Fatalf("cut at %d: the slim decoder read what client-go rejects: %v", cut, err)
		}
		a, _ := transformSlice(nil, true)(sl)
		e, _ := transformSlice(nil, true)(want)
		if !sameSlim(a, e) {
			t.Fatalf("cut at %d: transformed %+v, want %+v", cut, a, e)
		}
	}
}

// genService is a generated Service of any type with every field the API
// has, those transformService reads each present or absent.
func genService(rng *rand.Rand, i int) *corev1.Service {
	pick := func(n int) bool { return rng.Intn(n) == 0 }
	now := metav1.NewTime(time.Unix(1_700_000_000+int64(i), 0))
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%d", i), Namespace: []string{"default", "shop"}[rng.Intn(2)],
			UID: types2UID(rng), ResourceVersion: fmt.Sprint(rng.Intn(1e6)), CreationTimestamp: now,
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"note": fmt.Sprint(i)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, Time: &now,
				FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{}}`)}}}},
		Spec: corev1.ServiceSpec{Type: []corev1.ServiceType{corev1.ServiceTypeClusterIP, corev1.ServiceTypeNodePort, corev1.ServiceTypeLoadBalancer, corev1.ServiceTypeExternalName, ""}[rng.Intn(5)],
			SessionAffinity: corev1.ServiceAffinityNone, PublishNotReadyAddresses: pick(2), IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}},
	}
	switch rng.Intn(4) {
	case 0:
		s.Spec.ClusterIP, s.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
	case 1:
		s.Spec.ClusterIP = fmt.Sprintf("10.96.0.%d", i%250)
	case 2:
		s.Spec.ClusterIP, s.Spec.ClusterIPs = fmt.Sprintf("10.96.1.%d", i%250), []string{fmt.Sprintf("10.96.1.%d", i%250), "fd00::a"}
	}
	if s.Spec.Type == corev1.ServiceTypeExternalName || pick(4) {
		s.Spec.ExternalName = "db.example.com"
	}
	if pick(2) {
		s.Spec.Selector = map[string]string{"app": "web"}
	}
	if pick(3) {
		s.Spec.ExternalIPs = []string{"192.0.2.1", "192.0.2.2"}
	}
	for j := range rng.Intn(4) {
		p := corev1.ServicePort{Name: []string{"", "http", "dns"}[rng.Intn(3)], Protocol: []corev1.Protocol{"", corev1.ProtocolTCP, corev1.ProtocolUDP}[rng.Intn(3)],
			Port: int32(80 + j), TargetPort: intstr.FromString("web")}
		if pick(2) {
			p.NodePort = int32(30000 + rng.Intn(2000))
		}
		s.Spec.Ports = append(s.Spec.Ports, p)
	}
	for range rng.Intn(3) {
		in := corev1.LoadBalancerIngress{IP: "203.0.113.7", Ports: []corev1.PortStatus{{Port: 80, Protocol: corev1.ProtocolTCP}}}
		if pick(2) {
			in = corev1.LoadBalancerIngress{Hostname: "lb.example.com"}
		}
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, in)
	}
	return s
}

// genNode is a generated Node with conditions, addresses of every type
// (some repeated, some empty), images and resources.
func genNode(rng *rand.Rand, i int) *corev1.Node {
	now := metav1.NewTime(time.Unix(1_700_000_000+int64(i), 0))
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%d", i), UID: types2UID(rng), ResourceVersion: fmt.Sprint(rng.Intn(1e6)),
		Labels: map[string]string{"kubernetes.io/hostname": fmt.Sprintf("node-%d", i)}},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.0.0/24"},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi")},
			Images:   []corev1.ContainerImage{{Names: []string{"registry.k8s.io/pause:3.10"}, SizeBytes: 320000}},
			NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.34.0"}}}
	for _, c := range []corev1.NodeConditionType{corev1.NodeMemoryPressure, corev1.NodeReady} {
		st := []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown}[rng.Intn(3)]
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: c, Status: st, LastHeartbeatTime: now, Reason: "r", Message: "m"})
	}
	types := []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeHostName, corev1.NodeInternalDNS}
	for j := range rng.Intn(5) {
		addr := fmt.Sprintf("192.168.%d.%d", i%250, j)
		if rng.Intn(6) == 0 {
			addr = ""
		}
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: types[rng.Intn(len(types))], Address: addr})
	}
	return n
}

// TestSlimCoreAsClientGo: for generated Services and Nodes sent in
// protobuf, the slim decoder gives what client-go's decoder gives, as far
// as their transforms (with and without a namespace filter) and the
// informer read them.
func TestSlimCoreAsClientGo(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	gv := corev1.SchemeGroupVersion
	for i := range 300 {
		b := encode(t, genService(rng, i), gv)
		w := clientGoDecode(t, b).(*corev1.Service)
		got, ok := slimDecode(t, b, gv, slimServiceKind, slimNodeKind).(*corev1.Service)
		if !ok || !sameMeta(&got.ObjectMeta, &w.ObjectMeta) || got.ManagedFields != nil {
			t.Fatalf("service %d: decoded %#v, want %#v", i, got, w)
		}
		for _, nss := range []map[string]bool{nil, {"shop": true}} {
			a, _ := transformService(nss)(got)
			e, _ := transformService(nss)(w)
			if ka, ke := a.(*kService), e.(*kService); !sameSlim(ka, ke) || ka.kMeta != ke.kMeta || len(ka.svc.ExternalIPs) != len(ke.svc.ExternalIPs) {
				t.Fatalf("service %d (namespaces %v): transformed\n%+v\nwant\n%+v", i, nss, ka, ke)
			}
		}
	}
	for i := range 300 {
		b := encode(t, genNode(rng, i), gv)
		w := clientGoDecode(t, b).(*corev1.Node)
		got, ok := slimDecode(t, b, gv, slimServiceKind, slimNodeKind).(*corev1.Node)
		if !ok || !sameMeta(&got.ObjectMeta, &w.ObjectMeta) || got.Status.Images != nil {
			t.Fatalf("node %d: decoded %#v, want %#v", i, got, w)
		}
		a, _ := transformNode(got)
		e, _ := transformNode(w)
		if ka, ke := a.(*kNode), e.(*kNode); !sameSlim(ka, ke) || ka.kMeta != ke.kMeta {
			t.Fatalf("node %d: transformed\n%+v\nwant\n%+v", i, ka, ke)
		}
	}
}

// BenchmarkWatchDecode decodes a watch event's EndpointSlice of ten
// endpoints (as the endpoint slice controller writes them: target Pods,
// node names, zones, managed fields) and a Service as client-go does and
// as the slim decoder does, each followed by its transform: the work per
// event before the handler.
func BenchmarkWatchDecode(b *testing.B) {
	ready, yes := true, true
	sl := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "web-abcde", Namespace: "shop", UID: "u", ResourceVersion: "123456",
		GenerateName: "web-", Labels: map[string]string{discoveryv1.LabelServiceName: "web", discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"},
		Annotations:     map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-12-06T03:00:00Z"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: "web", UID: "s", Controller: &yes, BlockOwnerDeletion: &yes}},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "discovery.k8s.io/v1",
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:addressType":{},"f:endpoints":{},"f:metadata":{"f:annotations":{".":{},"f:endpoints.kubernetes.io/last-change-trigger-time":{}},"f:generateName":{},"f:labels":{".":{},"f:endpointslice.kubernetes.io/managed-by":{},"f:kubernetes.io/service-name":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"s\"}":{}}},"f:ports":{}}`)}}}},
		AddressType: discoveryv1.AddressTypeIPv4}
	for i := range 10 {
		node, zone := fmt.Sprintf("node-%d", i), "zone-a"
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.1.2.%d", i)}, NodeName: &node, Zone: &zone,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: new(bool)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: fmt.Sprintf("web-7d9f8-%d", i), UID: types.UID(fmt.Sprintf("pod-%d", i))}})
	}
	name, proto, port := "http", corev1.ProtocolTCP, int32(8080)
	sl.Ports = []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}}
	svc := genService(rand.New(rand.NewSource(1)), 1)
	for _, c := range []struct {
		name string
		obj  runtime.Object
		gv   schema.GroupVersion
		fn   func(any) (any, error)
	}{
		{"slice", sl, discoveryv1.SchemeGroupVersion, transformSlice(nil, false)},
		{"service", svc, corev1.SchemeGroupVersion, transformService(nil)},
	} {
		data := encode(b, c.obj, c.gv)
		b.Run(c.name+"/client-go", func(b *testing.B) {
			d := protobufInfo(b).Serializer
			b.ReportAllocs()
			for b.Loop() {
				obj, _, err := d.Decode(data, nil, nil)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = c.fn(obj)
			}
		})
		b.Run(c.name+"/slim", func(b *testing.B) {
			kinds := []slimKind{slimSliceKind, slimServiceKind}
			b.ReportAllocs()
			for b.Loop() {
				obj, _, ok := decodeSlim(data, kinds)
				if !ok {
					b.Fatal("not decoded")
				}
				_, _ = c.fn(obj)
			}
		})
	}
}

// FuzzSlimSlice: whatever bytes both the slim decoder and client-go read
// as an EndpointSlice, the two read as the same kSlice
// (transformed with multicluster and without), also once the bytes are
// overwritten: the decoder's views of them end with the decode. Nothing
// panics. Seeds: generated slices in protobuf.
func FuzzSlimSlice(f *testing.F) {
	rng := rand.New(rand.NewSource(7))
	for i := range 8 {
		f.Add(encode(f, genSlice(rng, i), discoveryv1.SchemeGroupVersion))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, _, ok := decodeSlim(data, []slimKind{slimSliceKind})
		if !ok {
			return
		}
		want, _, err := protobufInfo(t).Serializer.Decode(data, nil, nil)
		if err != nil {
			// client-go checks the wire types of the fields the slim
			// decoder skips too (an owner reference's, a managed
			// field's): bytes the API server never sends
			return
		}
		w, ok := want.(*discoveryv1.EndpointSlice)
		if !ok {
			t.Fatalf("client-go read a %T", want)
		}
		for i := range data {
			data[i] = 0x5a
		}
		k := got.(*kSlice)
		if k.initialEventsEnd != (w.Annotations[metav1.InitialEventsAnnotationKey] == "true") {
			t.Fatalf("closing bookmark %v, annotations %v", k.initialEventsEnd, w.Annotations)
		}
		for _, mc := range []bool{false, true} {
			if ka, ke, ok := transformedAlike(k, w, nil, mc); !ok {
				t.Fatalf("mc %v: slim\n%+v\nclient-go\n%+v", mc, ka, ke)
			}
		}
	})
}
