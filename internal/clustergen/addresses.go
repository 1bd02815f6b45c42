package clustergen

import (
	"math/rand"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// The address plan. Cluster IPs come from the Service CIDRs of the test
// cluster (kube-apiserver --service-cluster-ip-range=10.96.0.0/16,fd00:96::/108),
// endpoint addresses from a pod range. A few blocks are never handed out:
// the nowhere blocks (questions ask for their reverse names: addresses that
// exist nowhere) and the caller's blocks (free for objects a test adds of
// its own, such as sync markers).
const (
	// NowhereIPv4 and NowhereIPv6 are never the address of anything.
	NowhereIPv4 = "10.244.255.0/24"
	NowhereIPv6 = "fd00:10:244:ffff::/64"
	// CallerIPv4 and CallerIPv6 are never used by the generator.
	CallerIPv4 = "10.254.0.0/16"
	CallerIPv6 = "fd00:254::/64"
)

// reservedIPs are cluster IPs the API server hands out itself (the
// kubernetes Service takes the first of the primary range) or that a real
// cluster gives its DNS Service; the generator never uses them.
var reservedIPs = []string{"10.96.0.0", "10.96.0.1", "10.96.0.10", "fd00:96::", "fd00:96::1", "fd00:96::a"}

// family is an IP family.
type family = corev1.IPFamily

const (
	v4 = corev1.IPv4Protocol
	v6 = corev1.IPv6Protocol
)

// clusterIP returns a cluster IP of fam that was never handed out:
// 10.96.0.0-10.96.254.255 or fd00:96::0:0-fd00:96::e:ffff (the last part
// of each range is left for nowhere questions).
func (c *Cluster) clusterIP(r *rand.Rand, fam family) string {
	for {
		var ip string
		if fam == v6 {
			b := [16]byte{0xfd, 0x00, 0x00, 0x96, 13: byte(r.Intn(15)), 14: byte(r.Intn(256)), 15: byte(1 + r.Intn(255))}
			ip = netip.AddrFrom16(b).String()
		} else {
			ip = netip.AddrFrom4([4]byte{10, 96, byte(r.Intn(255)), byte(1 + r.Intn(254))}).String()
		}
		if !c.used[ip] {
			c.used[ip] = true
			return ip
		}
	}
}

// podIP returns an endpoint address of fam that was never handed out:
// 10.244.0.1-10.244.254.254, or in fd00:10:244::/48 (not its ffff subnet),
// a tenth of them ending in "::" (whose dashed form ends in "--", which
// the schema completes with a 0).
func (c *Cluster) podIP(r *rand.Rand, fam family) string {
	for {
		var ip string
		if fam == v6 {
			b := [16]byte{0xfd, 0x00, 0x00, 0x10, 0x02, 0x44, 6: byte(r.Intn(255)), 7: byte(r.Intn(256))}
			switch r.Intn(10) {
			case 0: // fd00:10:244:x::
			case 1, 2: // fd00:10:244::y
				b[6], b[7] = 0, 0
				b[14], b[15] = byte(r.Intn(256)), byte(1+r.Intn(255))
			default:
				b[12], b[13], b[14], b[15] = byte(r.Intn(256)), byte(r.Intn(256)), byte(r.Intn(256)), byte(1+r.Intn(255))
			}
			ip = netip.AddrFrom16(b).String()
		} else {
			ip = netip.AddrFrom4([4]byte{10, 244, byte(r.Intn(255)), byte(1 + r.Intn(254))}).String()
		}
		if !c.used[ip] {
			c.used[ip] = true
			return ip
		}
	}
}

// nowhereIPs are addresses of no object: in the nowhere blocks, in the
// unused end of the Service CIDRs, and outside every cluster range.
func nowhereIPs(r *rand.Rand) []string {
	return []string{
		netip.AddrFrom4([4]byte{10, 244, 255, byte(1 + r.Intn(254))}).String(),
		netip.AddrFrom4([4]byte{10, 96, 255, byte(1 + r.Intn(254))}).String(),
		"192.0.2.77",
		netip.AddrFrom16([16]byte{0xfd, 0x00, 0x00, 0x10, 0x02, 0x44, 0xff, 0xff, 15: byte(1 + r.Intn(255))}).String(),
		netip.AddrFrom16([16]byte{0xfd, 0x00, 0x00, 0x96, 13: 0x0f, 15: byte(1 + r.Intn(255))}).String(),
		"2001:db8::77",
	}
}

// familyOf is the family of address ip (IPv4 unless it parses as IPv6).
func familyOf(ip string) family {
	if a, err := netip.ParseAddr(ip); err == nil && a.Is6() {
		return v6
	}
	return v4
}
