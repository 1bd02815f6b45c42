package publish

import (
	"context"
	"net"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/miekg/dns"
)

// probeTimeout bounds one probe.
const probeTimeout = time.Second

// probeDNS asks addr for the SOA of zone over UDP: any reply, whatever its
// rcode, shows a server that answers.
func probeDNS(ctx context.Context, addr, zone string) error {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(zone), dns.TypeSOA)
	c := &dns.Client{Net: "udp", Timeout: probeTimeout}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, _, err := c.ExchangeContext(ctx, m, addr)
	return err
}

// probePods probes this replica until it has answered once (so that it is
// published only once its DNS server listens), and the peers whose Lease
// has lapsed, counting their failures in a row; a peer with a live Lease
// is not probed and its count starts over. (A pod's Ready condition plays
// no part: after a long API outage the node controller marks every pod
// not ready while the replicas answer; a lapsed Lease is the API's own
// sign that a replica is cut off.)
func (p *Publisher) probePods(ctx context.Context) {
	in := p.inputs()
	if in.service == nil {
		return
	}
	port := dnsPort(in.service)
	p.mu.Lock()
	selfOK := p.selfOK
	p.mu.Unlock()
	seen := map[string]bool{}
	for _, pod := range in.pods {
		addr := podAddr(pod, families(in.service)[0])
		if addr == "" || port == 0 {
			continue
		}
		target := net.JoinHostPort(addr, strconv.Itoa(int(port)))
		if pod.Name == p.cfg.Pod {
			if !selfOK && p.serving() && p.probe(ctx, target, p.cfg.Zone) == nil {
				p.mu.Lock()
				p.selfOK = true
				p.mu.Unlock()
			}
			continue
		}
		seen[pod.Name] = true
		if in.live[pod.Name] || pod.DeletionTimestamp != nil {
			p.setFailures(pod.Name, 0)
			continue
		}
		if err := p.probe(ctx, target, p.cfg.Zone); err != nil {
			p.setFailures(pod.Name, p.failuresOf(pod.Name)+1)
		} else {
			p.setFailures(pod.Name, 0)
		}
	}
	p.mu.Lock()
	for name := range p.failures {
		if !seen[name] {
			delete(p.failures, name)
		}
	}
	p.mu.Unlock()
}

func (p *Publisher) failuresOf(pod string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failures[pod]
}

func (p *Publisher) setFailures(pod string, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n == 0 {
		delete(p.failures, pod)
		return
	}
	p.failures[pod] = n
}

// dnsPort is the container port behind the Service's first UDP port (the
// DNS port), or 0.
func dnsPort(svc *corev1.Service) int32 {
	for _, sp := range svc.Spec.Ports {
		if sp.Protocol == corev1.ProtocolUDP {
			if sp.TargetPort.IntVal != 0 {
				return sp.TargetPort.IntVal
			}
			return sp.Port
		}
	}
	return 0
}
