//go:build engine

package docker_test

import (
	"context"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"

	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/container/docker"
	"github.com/capct/cluster-api-provider-container/internal/container/docker/dockertest"
	"github.com/capct/cluster-api-provider-container/internal/container/runtimetest"
)

// socketProxy stands between a client and the engine's socket, so that a
// test can take the engine away from that client (close its connections
// and refuse new ones) and bring it back, without touching the engine that
// other tests share.
type socketProxy struct {
	t      *testing.T
	path   string
	target string

	mu    sync.Mutex
	ln    net.Listener
	conns []net.Conn
}

func newSocketProxy(t *testing.T, target string) *socketProxy {
	p := &socketProxy{t: t, path: filepath.Join(t.TempDir(), "engine.sock"), target: target}
	p.up()
	t.Cleanup(p.down)
	return p
}

// up listens again on the same path.
func (p *socketProxy) up() {
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		p.t.Fatalf("proxy listen: %v", err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e, err := net.Dial("unix", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, e)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(e, c); _ = e.Close() }()
			go func() { _, _ = io.Copy(c, e); _ = c.Close() }()
		}
	}()
}

// down cuts every connection and stops listening: to its clients the
// engine is gone (connection refused).
func (p *socketProxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

// TestEventStreamReconnectsAfterTheEngineWasAway takes the engine away from
// an open event stream for a few seconds, twice, starts a container each
// time meanwhile, and expects the stream to come back by itself and deliver
// that start: the first time before the stream delivered anything (it
// resumes from when it opened), the second after (it resumes from the last
// event).
func TestEventStreamReconnectsAfterTheEngineWasAway(t *testing.T) {
	rt := dockertest.NewRuntime(t)
	e := runtimetest.NewEnv(t, rt, testImage(t, rt), container.IPv4)
	host := rt.Client().DaemonHost()
	if !strings.HasPrefix(host, "unix://") {
		t.Fatalf("the proxy needs the engine on a unix socket, DOCKER_HOST is %s", host)
	}
	proxy := newSocketProxy(t, strings.TrimPrefix(host, "unix://"))
	proxied, err := docker.New(docker.WithClientOpts(client.WithHost("unix://" + proxy.path)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxied.Close() })

	ctx, cancel := context.WithCancel(runtimetest.Ctx(t))
	defer cancel()
	ch, err := proxied.Events(ctx, map[string]string{container.LabelClusterID: e.Owner.ClusterID})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the stream connects
	for _, name := range []string{"away-1", "away-2"} {
		proxy.down()
		// While the engine is away from the stream, a container starts.
		started := e.Running(t, name)
		time.Sleep(2 * time.Second) // a few failed reconnects, so the backoff grows
		if _, err := proxied.Inspect(ctx, started.Name); !container.IsUnreachable(err) {
			t.Fatalf("the proxy did not take the engine away: %v", err)
		}
		proxy.up()
		waitForEvent(t, ch, container.EventStart, started.Name)
	}
}

func waitForEvent(t *testing.T, ch <-chan container.Event, typ container.EventType, name string) {
	t.Helper()
	deadline := time.After(15 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the event stream closed while waiting for %s of %s", typ, name)
			}
			if ev.Type == typ && ev.Name == name {
				return
			}
		case <-deadline:
			t.Fatalf("no %s event of %s within 15s", typ, name)
		}
	}
}
