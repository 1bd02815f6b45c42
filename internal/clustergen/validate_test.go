package clustergen

import (
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// The rules of kube-apiserver's validation (pkg/apis/core/validation and
// pkg/apis/discovery/validation) that generated objects meet, as checks:
// the end-to-end test proves them against the real API server, these
// catch a broken generator without one.

var (
	serviceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:96::/108")}
	noneOf       = []netip.Prefix{netip.MustParsePrefix(NowhereIPv4), netip.MustParsePrefix(NowhereIPv6),
		netip.MustParsePrefix(CallerIPv4), netip.MustParsePrefix(CallerIPv6)}
)

// validCluster lists every rule c breaks.
func validCluster(c *Cluster) []string {
	var errs []string
	add := func(obj string, msgs ...string) {
		for _, m := range msgs {
			errs = append(errs, obj+": "+m)
		}
	}
	nss, ips := map[string]bool{}, map[string]string{}
	for _, ns := range c.Namespaces {
		add("namespace "+ns.Name, validation.IsDNS1123Label(ns.Name)...)
		if nss[ns.Name] {
			add("namespace "+ns.Name, "duplicate")
		}
		nss[ns.Name] = true
	}
	svcs := map[string]bool{}
	for _, s := range c.Services {
		key := s.Namespace + "/" + s.Name
		if !nss[s.Namespace] {
			add("service "+key, "no such namespace")
		}
		if svcs[key] {
			add("service "+key, "duplicate")
		}
		svcs[key] = true
		add("service "+key, validService(s)...)
		for _, ip := range s.Spec.ClusterIPs {
			if ip == corev1.ClusterIPNone {
				continue
			}
			if other, ok := ips[ip]; ok {
				add("service "+key, "cluster IP "+ip+" also of "+other)
			}
			ips[ip] = key
		}
	}
	slices := map[string]bool{}
	for _, sl := range c.Slices {
		key := sl.Namespace + "/" + sl.Name
		if !nss[sl.Namespace] {
			add("slice "+key, "no such namespace")
		}
		if slices[key] {
			add("slice "+key, "duplicate")
		}
		slices[key] = true
		add("slice "+key, validSlice(sl)...)
	}
	return errs
}

// validService lists the rules s breaks.
func validService(s *corev1.Service) []string {
	errs := validation.IsDNS1035Label(s.Name)
	spec := s.Spec
	switch {
	case spec.Type == corev1.ServiceTypeExternalName:
		errs = append(errs, validation.IsDNS1123Subdomain(strings.TrimSuffix(spec.ExternalName, "."))...)
		if spec.ClusterIP != "" || len(spec.ClusterIPs) > 0 || spec.IPFamilyPolicy != nil || len(spec.IPFamilies) > 0 {
			errs = append(errs, "ExternalName with cluster IP fields")
		}
	case spec.ClusterIP == corev1.ClusterIPNone:
		if spec.Type != corev1.ServiceTypeClusterIP || len(spec.ClusterIPs) != 1 || spec.ClusterIPs[0] != corev1.ClusterIPNone {
			errs = append(errs, fmt.Sprintf("headless of type %s with %v", spec.Type, spec.ClusterIPs))
		}
	default:
		errs = append(errs, validClusterIPs(spec)...)
		if len(spec.Ports) == 0 {
			errs = append(errs, "no ports")
		}
	}
	names, keys := map[string]bool{}, map[string]bool{}
	for _, p := range spec.Ports {
		if p.Name == "" && len(spec.Ports) > 1 {
			errs = append(errs, "unnamed port among several")
		}
		if p.Name != "" {
			errs = append(errs, validation.IsDNS1123Label(p.Name)...)
		}
		if p.Port < 1 || p.Port > 65535 || p.TargetPort.IntVal < 0 || p.TargetPort.IntVal > 65535 {
			errs = append(errs, fmt.Sprintf("port %d→%d", p.Port, p.TargetPort.IntVal))
		}
		k := fmt.Sprint(p.Port, p.Protocol)
		if names[p.Name] || keys[k] {
			errs = append(errs, "duplicate port "+p.Name+" "+k)
		}
		names[p.Name], keys[k] = true, true
		errs = append(errs, validProtocol(p.Protocol)...)
	}
	return errs
}

// validClusterIPs checks a non-headless Service's cluster IPs against its
// family fields and the Service CIDRs.
func validClusterIPs(spec corev1.ServiceSpec) []string {
	var errs []string
	if len(spec.ClusterIPs) == 0 || len(spec.ClusterIPs) > 2 || spec.ClusterIP != spec.ClusterIPs[0] ||
		len(spec.IPFamilies) != len(spec.ClusterIPs) || spec.IPFamilyPolicy == nil {
		return []string{fmt.Sprintf("cluster IPs %v families %v policy %v", spec.ClusterIPs, spec.IPFamilies, spec.IPFamilyPolicy)}
	}
	if len(spec.ClusterIPs) == 2 && *spec.IPFamilyPolicy == corev1.IPFamilyPolicySingleStack {
		errs = append(errs, "two cluster IPs, single stack")
	}
	for i, ip := range spec.ClusterIPs {
		a, err := netip.ParseAddr(ip)
		if err != nil || a.String() != ip {
			errs = append(errs, "cluster IP not canonical: "+ip)
			continue
		}
		if familyOf(ip) != spec.IPFamilies[i] {
			errs = append(errs, "cluster IP "+ip+" not of family "+string(spec.IPFamilies[i]))
		}
		if !serviceCIDRs[0].Contains(a) && !serviceCIDRs[1].Contains(a) {
			errs = append(errs, "cluster IP outside the Service CIDRs: "+ip)
		}
		for _, r := range reservedIPs {
			if ip == r {
				errs = append(errs, "reserved cluster IP "+ip)
			}
		}
	}
	if len(spec.ClusterIPs) == 2 && familyOf(spec.ClusterIPs[0]) == familyOf(spec.ClusterIPs[1]) {
		errs = append(errs, "two cluster IPs of one family")
	}
	return errs
}

func validProtocol(p corev1.Protocol) []string {
	if p != corev1.ProtocolTCP && p != corev1.ProtocolUDP && p != corev1.ProtocolSCTP {
		return []string{"protocol " + string(p)}
	}
	return nil
}

// validSlice lists the rules sl breaks.
func validSlice(sl *discoveryv1.EndpointSlice) []string {
	errs := validation.IsDNS1123Subdomain(sl.Name)
	for k, v := range sl.Labels {
		errs = append(errs, validation.IsQualifiedName(k)...)
		errs = append(errs, validation.IsValidLabelValue(v)...)
	}
	names := map[string]bool{}
	for _, p := range sl.Ports {
		if p.Name == nil || p.Protocol == nil {
			errs = append(errs, "port without name or protocol")
			continue
		}
		if *p.Name != "" {
			errs = append(errs, validation.IsDNS1123Label(*p.Name)...)
		}
		if names[*p.Name] {
			errs = append(errs, "duplicate port name "+*p.Name)
		}
		names[*p.Name] = true
		errs = append(errs, validProtocol(*p.Protocol)...)
	}
	for _, e := range sl.Endpoints {
		if len(e.Addresses) == 0 || len(e.Addresses) > 100 {
			errs = append(errs, fmt.Sprintf("%d addresses", len(e.Addresses)))
		}
		for _, a := range e.Addresses {
			errs = append(errs, validAddress(sl.AddressType, a)...)
		}
		if e.Hostname != nil {
			errs = append(errs, validation.IsDNS1123Label(*e.Hostname)...)
		}
		if e.NodeName != nil {
			errs = append(errs, validation.IsDNS1123Subdomain(*e.NodeName)...)
		}
	}
	return errs
}

// validAddress checks an endpoint address against the slice's type.
func validAddress(at discoveryv1.AddressType, a string) []string {
	if at == discoveryv1.AddressTypeFQDN {
		var errs []string
		for _, e := range validation.IsFullyQualifiedDomainName(nil, a) {
			errs = append(errs, e.Error())
		}
		return errs
	}
	ip, err := netip.ParseAddr(a)
	switch {
	case err != nil || ip.String() != a:
		return []string{"address not canonical: " + a}
	case (at == discoveryv1.AddressTypeIPv6) != ip.Is6():
		return []string{"address " + a + " not of type " + string(at)}
	case ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsMulticast():
		return []string{"special address " + a}
	}
	for _, p := range noneOf {
		if p.Contains(ip) {
			return []string{"address in a block the generator leaves alone: " + a}
		}
	}
	return nil
}
