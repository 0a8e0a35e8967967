package hostcapacity

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/capct/cluster-api-provider-container/internal/container"
)

// The sysctls whose limits nodes consume. Each is a per-user limit, and
// every node container's processes run as root, so all nodes on a host
// share one budget.
const (
	InotifyInstances = "fs.inotify.max_user_instances"
	InotifyWatches   = "fs.inotify.max_user_watches"
)

// Sysctls are the limits checked, in the order they are reported.
var Sysctls = []string{InotifyInstances, InotifyWatches}

// raiseTo is what a message suggests raising each limit to: kind's advice
// for many nodes on one host, or twice the need when that is more.
var raiseTo = map[string]int64{InotifyInstances: 8192, InotifyWatches: 524288}

// Values maps a sysctl to a number: a limit, a use or a cost.
type Values map[string]int64

// Costs are what a node container of each role consumes of each limit. A
// role or sysctl left out costs nothing.
type Costs map[container.Role]Values

// DefaultCosts were measured on capct/node:v1.35.4 (docs/lifecycle.md has
// the commands): a kubeadm control plane with its Node Ready holds 26
// inotify instances and 257 watches as root, of which its systemd,
// containerd, kubelet and kube-proxy, all that a worker runs, hold 13 and
// 238.
var DefaultCosts = Costs{
	container.RoleControlPlane: {InotifyInstances: 26, InotifyWatches: 260},
	container.RoleWorker:       {InotifyInstances: 13, InotifyWatches: 240},
}

// DefaultReserve stands for the root-owned use that CAPCT does not create:
// the host's own services, and a management cluster's node when it shares
// the host, as in the quickstart.
var DefaultReserve = Values{InotifyInstances: 32, InotifyWatches: 1024}

// Reader reads the host's current limits.
type Reader interface {
	// Read returns the limits it can read; a limit the host does not have
	// is left out, and is then not checked.
	Read() (Values, error)
}

// ProcSys reads limits from a /proc/sys folder: the manager's own, which
// shows the host's values when the manager runs on the container host.
type ProcSys struct {
	// Dir is the folder; empty means /proc/sys.
	Dir string
}

// Read implements Reader.
func (p ProcSys) Read() (Values, error) {
	dir := p.Dir
	if dir == "" {
		dir = "/proc/sys"
	}
	out := Values{}
	for _, name := range Sysctls {
		path := filepath.Join(dir, filepath.FromSlash(strings.ReplaceAll(name, ".", "/")))
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("failed to read %s: %w", name, err)
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("failed to parse %s from %s: %w", name, path, err)
		}
		out[name] = v
	}
	return out, nil
}

// Shortfall is a limit that another node would exceed.
type Shortfall struct {
	// Sysctl names the limit.
	Sysctl string
	// Limit is its current value.
	Limit int64
	// InUse is the estimated use: the reserve plus the nodes' costs.
	InUse int64
	// Nodes is how many node containers the estimate counts.
	Nodes int
	// Need is what the next node costs.
	Need int64
}

// Message says what holds the machine back and how to raise the limit. It
// names only sysctls and numbers, never anything of the cluster's data.
func (s *Shortfall) Message() string {
	to := max(raiseTo[s.Sysctl], 2*(s.InUse+s.Need))
	return fmt.Sprintf("The container host has no room for another node: %s is %d, and %d node containers with the host's reserve use about %d of it, "+
		"while another node needs %d. Raise it on the container host, e.g. `sysctl -w %s=%d` (and in /etc/sysctl.d/ to keep it after a reboot); "+
		"the machine goes on by itself once there is room",
		s.Sysctl, s.Limit, s.Nodes, s.InUse, s.Need, s.Sysctl, to)
}

// Check returns the first limit that one more node of role would exceed,
// given the nodes already counted (by role), or nil. A limit that is not
// known, or that the role does not consume, is not checked.
func Check(limits, reserve Values, costs Costs, nodes map[container.Role]int, role container.Role) *Shortfall {
	count := 0
	for _, n := range nodes {
		count += n
	}
	for _, name := range Sysctls {
		limit, known := limits[name]
		need := costs[role][name]
		if !known || need <= 0 {
			continue
		}
		use := reserve[name]
		for r, n := range nodes {
			use += int64(n) * costs[r][name]
		}
		if use+need > limit {
			return &Shortfall{Sysctl: name, Limit: limit, InUse: use, Nodes: count, Need: need}
		}
	}
	return nil
}
