package loadbalancer

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"k8s.io/utils/clock"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
)

const (
	// candidatePath is where a new configuration is checked before it
	// replaces ConfigPath.
	candidatePath = ConfigPath + ".candidate"
	// StatsPort and StatsPath are where the rendered configuration serves
	// HAProxy's statistics, which tell CAPCT the configuration it runs.
	// Custom templates must keep them.
	StatsPort = 8404
	StatsPath = "/stats"
	// markerPrefix names the empty backend appended to every rendered
	// configuration; the rest of its name is a hash of the configuration.
	markerPrefix = "capct-config-"
	// checkTimeout bounds haproxy -c.
	checkTimeout = 30 * time.Second
	// statsTimeout bounds one read of the statistics.
	statsTimeout = 3 * time.Second
	// reloadWait and reloadPoll: how long, and how often, a reload is
	// given to show in the statistics.
	reloadWait = 5 * time.Second
	reloadPoll = 250 * time.Millisecond
	// maxReported bounds how much of HAProxy's output a condition carries.
	maxReported = 1024
)

// ReloadError says HAProxy does not run the wanted configuration. Reason is
// the LoadBalancerAvailable reason to report.
type ReloadError struct {
	Reason string
	Err    error
}

func (e *ReloadError) Error() string { return e.Err.Error() }

// Unwrap returns the cause.
func (e *ReloadError) Unwrap() error { return e.Err }

// StatsFunc reads HAProxy's statistics CSV from the load balancer m.
type StatsFunc func(ctx context.Context, m *container.Machine) ([]byte, error)

// HTTPStats reads the statistics page of the load balancer at its address
// on the cluster network, which the manager reaches anyway: the workload
// API server is behind that address.
func HTTPStats(ctx context.Context, m *container.Machine) ([]byte, error) {
	addr := m.IPv4
	if !addr.IsValid() {
		addr = m.IPv6
	}
	if !addr.IsValid() {
		return nil, fmt.Errorf("load balancer %s has no address", m.Name)
	}
	url := fmt.Sprintf("http://%s%s;csv", net.JoinHostPort(addr.String(), strconv.Itoa(StatsPort)), StatsPath)
	return getStats(ctx, url)
}

// statsClient reads statistics pages. The page is served by a
// configuration a tenant may write (customHAProxyConfigTemplateRef), so its
// answer is never followed: a redirect would make the manager send a
// request to any address the tenant names. Nor does it go through the
// manager's HTTP proxy: the load balancer is on a network the manager
// reaches directly.
var statsClient = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Transport:     &http.Transport{Proxy: nil, DisableKeepAlives: true},
}

// getStats GETs a statistics page, bounded in time and size.
func getStats(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, statsTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := statsClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s answered %s", url, resp.Status)
	}
	return body, nil
}

// Configuration is what Sync writes into a load balancer for cfg: custom
// (or the default template when it is empty) rendered by Render, with the
// marker backend appended. marker is that backend's name, which HAProxy's
// statistics list once it runs this configuration. The image's built-in
// configuration and the node-image test take it from here too, so that
// nothing else writes HAProxy configurations of its own.
func Configuration(custom string, cfg Config) (config []byte, marker string, err error) {
	rendered, err := Render(custom, cfg)
	if err != nil {
		return nil, "", err
	}
	config, marker = withMarker(rendered)
	return config, marker, nil
}

// withMarker appends to a rendered configuration an empty backend named
// after the configuration's hash. HAProxy lists it in its statistics, so
// they tell which configuration the running process loaded; a template
// cannot forget it.
func withMarker(rendered []byte) (config []byte, marker string) {
	sum := sha256.Sum256(rendered)
	marker = markerPrefix + hex.EncodeToString(sum[:6])
	var b bytes.Buffer
	b.Write(rendered)
	if len(rendered) > 0 && rendered[len(rendered)-1] != '\n' {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "\n# Added by CAPCT: its name in HAProxy's statistics tells which configuration runs.\nbackend %s\n", marker)
	return b.Bytes(), marker
}

// check asks the container's HAProxy whether it would load config, without
// touching the configuration it runs.
func check(ctx context.Context, rt container.Runtime, name string, owner container.Owner, config []byte) error {
	if err := rt.WriteFile(ctx, name, owner, candidatePath, config, 0o644); err != nil {
		return fmt.Errorf("failed to write the candidate configuration of load balancer %s: %w", name, err)
	}
	res, err := rt.Exec(ctx, name, owner, container.ExecInput{Cmd: []string{"haproxy", "-c", "-f", candidatePath}, Timeout: checkTimeout})
	if err != nil {
		return fmt.Errorf("failed to check the configuration of load balancer %s: %w", name, err)
	}
	if res.ExitCode != 0 {
		out := strings.TrimSpace(string(res.Stderr) + "\n" + string(res.Stdout))
		if len(out) > maxReported {
			out = out[len(out)-maxReported:]
		}
		return &ReloadError{Reason: infrav1.LoadBalancerConfigInvalidReason,
			Err: fmt.Errorf("HAProxy refuses the rendered configuration of load balancer %s (haproxy -c exit code %d), so it keeps the previous one: %s", name, res.ExitCode, out)}
	}
	return nil
}

// runs reports whether HAProxy in m lists the backend marker. When wait is
// set (a reload was just signalled) it asks again for a few seconds, as the
// new workers take a moment to start.
func (lb *LoadBalancer) runs(ctx context.Context, m *container.Machine, marker string, wait bool) (bool, error) {
	stats, clk := lb.Stats, lb.Clock
	if stats == nil {
		stats = HTTPStats
	}
	if clk == nil {
		clk = clock.RealClock{}
	}
	deadline := clk.Now().Add(reloadWait)
	for {
		csv, err := stats(ctx, m)
		if err == nil && listsBackend(csv, marker) {
			return true, nil
		}
		if !wait || !clk.Now().Before(deadline) {
			return false, err
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-clk.After(reloadPoll):
		}
	}
}

// listsBackend reports whether HAProxy's statistics CSV has the backend.
func listsBackend(csv []byte, backend string) bool {
	for _, line := range strings.Split(string(csv), "\n") {
		if strings.HasPrefix(line, backend+",BACKEND,") {
			return true
		}
	}
	return false
}
