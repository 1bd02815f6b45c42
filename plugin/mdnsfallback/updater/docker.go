package updater

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
)

// dockerEngine is the engine of the updater over the Docker Engine API
// (Docker or Podman's compatible service), with API version negotiation.
type dockerEngine struct {
	cli *client.Client
}

// NewDocker makes a client for endpoint; "" takes DOCKER_HOST (and
// the other DOCKER_* variables), else unix:///var/run/docker.sock.
func NewDocker(endpoint string) (*dockerEngine, error) {
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if endpoint != "" {
		opts = append(opts, client.WithHost(endpoint))
	}
	cli, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, err
	}
	return &dockerEngine{cli: cli}, nil
}

var _ Engine = (*dockerEngine)(nil)

func (d *dockerEngine) Endpoint() string { return d.cli.DaemonHost() }

func (d *dockerEngine) Close() error { return d.cli.Close() }

func (d *dockerEngine) Ping(ctx context.Context) (string, error) {
	p, err := d.cli.Ping(ctx)
	if err != nil {
		return "", err
	}
	d.cli.NegotiateAPIVersionPing(p)
	return d.cli.ClientVersion(), nil
}

// Events follows container start/die/stop/destroy and network
// connect/disconnect events.
func (d *dockerEngine) Events(ctx context.Context, since time.Time) (<-chan Event, <-chan error) {
	f := filters.NewArgs(
		filters.Arg("type", string(events.ContainerEventType)),
		filters.Arg("type", string(events.NetworkEventType)),
		filters.Arg("event", "start"), filters.Arg("event", "die"),
		filters.Arg("event", "stop"), filters.Arg("event", "destroy"),
		filters.Arg("event", "connect"), filters.Arg("event", "disconnect"),
	)
	opts := events.ListOptions{Filters: f, Since: fmt.Sprintf("%d.%09d", since.Unix(), since.Nanosecond())}
	msgs, errs := d.cli.Events(ctx, opts)
	out := make(chan Event)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-msgs:
				if !ok {
					return
				}
				ev, ok := slimEvent(m)
				if !ok {
					continue
				}
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, errs
}

// slimEvent keeps what the updater needs of an engine event.
func slimEvent(m events.Message) (Event, bool) {
	action := string(m.Action)
	switch m.Type {
	case events.ContainerEventType:
		switch action {
		case "start", "die", "stop", "destroy":
			return Event{Action: action, ID: m.Actor.ID}, m.Actor.ID != ""
		}
	case events.NetworkEventType:
		switch action {
		case "connect", "disconnect":
			id := m.Actor.Attributes["container"]
			return Event{Action: action, ID: id}, id != ""
		}
	}
	return Event{}, false
}

// Running lists the running containers and inspects them (the list lacks
// hostname and domain name), inspectConcurrency at a time; a container
// whose inspect fails is left out and named in failed.
func (d *dockerEngine) Running(ctx context.Context) ([]Container, []string, error) {
	list, err := d.cli.ContainerList(ctx, container.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	out := make([]Container, len(list))
	errs := make([]error, len(list))
	sem := make(chan struct{}, inspectConcurrency)
	var wg sync.WaitGroup
	for i, s := range list {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			ictx, cancel := context.WithTimeout(ctx, engineCallTimeout)
			out[i], errs[i] = d.Inspect(ictx, s.ID)
			cancel()
		}()
	}
	wg.Wait()
	var running []Container
	var failed []string
	for i, c := range out {
		switch {
		case errs[i] != nil:
			failed = append(failed, list[i].ID)
		case c.Running:
			running = append(running, c)
		}
	}
	return running, failed, ctx.Err()
}

func (d *dockerEngine) Inspect(ctx context.Context, id string) (Container, error) {
	r, err := d.cli.ContainerInspect(ctx, id)
	if cerrdefs.IsNotFound(err) {
		return Container{ID: id}, nil
	}
	if err != nil {
		return Container{}, err
	}
	return slimContainer(r), nil
}

// slimContainer converts an inspect answer to the updater's container.
func slimContainer(r container.InspectResponse) Container {
	c := Container{Networks: map[string]Net{}}
	if r.ContainerJSONBase != nil {
		c.ID = r.ID
		c.Name = strings.TrimPrefix(r.Name, "/")
		if r.State != nil {
			c.Running = r.State.Running
		}
		if r.HostConfig != nil {
			c.NetworkMode = string(r.HostConfig.NetworkMode)
			if c.NetworkMode == "default" {
				c.NetworkMode = network.NetworkBridge
			}
		}
	}
	if r.Config != nil {
		c.Hostname, c.Domainname = r.Config.Hostname, r.Config.Domainname
		c.Check = r.Config.Labels[checkLabel]
	}
	if r.NetworkSettings != nil {
		for name, ep := range r.NetworkSettings.Networks {
			if ep == nil {
				continue
			}
			var n Net
			if a, err := netip.ParseAddr(ep.IPAddress); err == nil && a.Unmap().Is4() {
				n.IPv4, n.Prefix4 = a.Unmap(), ep.IPPrefixLen
			}
			if a, err := netip.ParseAddr(ep.GlobalIPv6Address); err == nil && a.Is6() && !a.Is4In6() {
				n.IPv6, n.Prefix6 = a, ep.GlobalIPv6PrefixLen
			}
			c.Networks[name] = n
		}
	}
	return c
}
