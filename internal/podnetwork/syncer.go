package podnetwork

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/naming"
	"github.com/capct/cluster-api-provider-container/internal/nodeipam"
)

// DefaultVerifyInterval is how long what a sync programmed into a node is
// trusted before the next sync reads the node's routes back. Within it, a
// sync changes only what changed since, from memory; a restarted container
// (NodeStarted) or a new one is read at once.
const DefaultVerifyInterval = 5 * time.Minute

// Syncer programs a cluster's pod network into its node containers. It is
// safe for concurrent use; one Syncer serves every cluster.
type Syncer struct {
	engines engines.Set
	reader  client.Reader
	clock   clock.PassiveClock
	// VerifyInterval defaults to DefaultVerifyInterval.
	VerifyInterval time.Duration

	mu       sync.Mutex
	clusters map[types.NamespacedName]*clusterState
}

// clusterState is what a Syncer remembers of one cluster.
type clusterState struct {
	// sync is held around a sync, so that a sync computed from an older
	// list cannot undo what a newer one did.
	sync sync.Mutex
	// nodes is what was programmed into each node container; only the
	// holder of sync touches it, and not from the goroutines of a sync.
	nodes map[string]programmed
	// table is the routes of the last sync; the nodes it brought to them
	// share it. Only the holder of sync touches it.
	table *RouteTable

	mu sync.Mutex
	// starts counts the starts of each node container seen since the
	// manager started; a node programmed at an older count has lost its
	// routes and masquerade rule with its network namespace's state.
	starts map[string]uint64
	// mtu is the pods' MTU (CNIConfig), read once from the cluster's
	// network when mtuKnown. Under mu, not sync: ConfigureNode reads it
	// while a sync runs.
	mtu      int
	mtuKnown bool
}

// programmed is what one node container was last brought to.
type programmed struct {
	id       string
	starts   uint64
	podCIDRs []netip.Prefix
	// table holds the node's routes into the cluster's pod network:
	// table.For(the node's name). Nodes brought to the same routes share
	// one table, so what a cluster's nodes remember grows with N, not N².
	table    *RouteTable
	verified time.Time
}

// NewSyncer returns a Syncer that reaches node containers on their engines
// in set and reads ContainerMachines through reader (the manager's cache is fine: a
// stale read only delays a route until the next sync; the Syncer never
// changes what it reads, so the cache need not copy it). clk defaults to
// the real clock.
func NewSyncer(set engines.Set, reader client.Reader, clk clock.PassiveClock) *Syncer {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &Syncer{engines: set, reader: reader, clock: clk, clusters: map[types.NamespacedName]*clusterState{}}
}

func (s *Syncer) state(cluster types.NamespacedName) *clusterState {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.clusters[cluster]
	if !ok {
		st = &clusterState{nodes: map[string]programmed{}, starts: map[string]uint64{}}
		s.clusters[cluster] = st
	}
	return st
}

// NodeStarted tells the Syncer that a node container of the cluster
// started (again): its routes and masquerade rule are gone, and the next
// sync programs it in full. Call it before waking the cluster's sync.
func (s *Syncer) NodeStarted(cluster types.NamespacedName, containerName string) {
	st := s.state(cluster)
	st.mu.Lock()
	st.starts[containerName]++
	st.mu.Unlock()
}

// ForgetCluster drops what the Syncer remembers of a deleted cluster.
func (s *Syncer) ForgetCluster(cluster *clusterv1.Cluster) {
	s.mu.Lock()
	delete(s.clusters, client.ObjectKeyFromObject(cluster))
	s.mu.Unlock()
}

// Sync brings every running node container of the cluster to its pod
// network: its CNI configuration for its own pod CIDRs, the masquerade rule
// for its pods' traffic leaving the pod network, a route to each other
// node's pod CIDRs through that node's address, and no route left into the
// pod network that no node holds any more. It runs commands only in nodes
// where something changed (one per node and change), and reads a node's
// routes back when it is new, restarted, or was last read more than
// VerifyInterval ago. It does nothing when node IPAM is off for the
// cluster. An error in one node does not stop the others; all are
// returned.
func (s *Syncer) Sync(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) error {
	cfg, enabled, _, err := nodeipam.ClusterConfig(cluster, cc)
	if err != nil || !enabled {
		// An invalid pod network has nothing to route; the machines'
		// PodCIDRAllocated condition reports it.
		return nil
	}
	owner := naming.ClusterOwner(cluster, cc)
	if !owner.Valid() {
		// No cluster ID yet, so no container of the cluster yet either.
		return nil
	}
	st := s.state(client.ObjectKeyFromObject(cluster))
	st.sync.Lock()
	defer st.sync.Unlock()

	// Read only, for their records: a cache that serves the cluster's
	// machines without a copy of each, per sync, spares the manager that
	// garbage (a reader that is not a cache ignores the option).
	machines := &infrav1.ContainerMachineList{}
	if err := s.reader.List(ctx, machines, client.InNamespace(cluster.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: cluster.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("failed to list the ContainerMachines of Cluster %s: %w", klog.KObj(cluster), err)
	}
	mtu, err := s.podMTU(ctx, st, cluster, cc)
	if err != nil {
		return err
	}
	cidrsOf := make(map[string][]netip.Prefix, len(machines.Items))
	for i := range machines.Items {
		cidrsOf[machines.Items[i].Name] = nodeipam.Recorded(&machines.Items[i])
	}
	// The nodes of an engine that does not answer are left out, and the
	// other nodes' routes to them go until it answers again: their traffic
	// has nowhere to go meanwhile, and the nodes that remain, and those
	// that replace the lost ones, get their routes and CNI configuration.
	containers, _, err := engines.ListReachable(ctx, s.engines, cc, owner, nil)
	if err != nil {
		return fmt.Errorf("failed to list the containers of Cluster %s: %w", klog.KObj(cluster), err)
	}
	var nodes []Node
	byName := map[string]engines.Owned{}
	for _, c := range containers {
		if !container.Role(c.Labels[container.LabelRole]).IsNode() || c.State != container.StateRunning {
			continue
		}
		byName[c.Name] = c
		nodes = append(nodes, Node{Name: c.Name, IPv4: c.IPv4, IPv6: c.IPv6, PodCIDRs: cidrsOf[c.Labels[container.LabelMachine]]})
	}
	st.forgetAllBut(byName)

	table := NewRouteTable(nodes)
	if table.Equal(st.table) {
		// Nothing moved: the nodes brought to the last table need nothing
		// (syncNode), and keep sharing it.
		table = st.table
	}
	st.table = table
	// Each node's commands are independent of the others', and on a busy
	// engine one node's take seconds: in turn, the last node of a
	// scale-out would wait for every other one's before its CNI
	// configuration, and so its Node's readiness.
	results := make([]nodeResult, len(nodes))
	slots := make(chan struct{}, maxConcurrentNodeSyncs)
	var wg sync.WaitGroup
	for i, n := range nodes {
		c := byName[n.Name]
		p, known := st.nodes[n.Name]
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			results[i].programmed, results[i].err = s.syncNode(ctx, st, c, owner.ForMachine(c.Labels[container.LabelMachine]), n, p, known, table, cfg.ClusterCIDRs, mtu)
		})
	}
	wg.Wait()
	var errs []error
	for i, n := range nodes {
		if err := results[i].err; err != nil {
			// Read the node back next time rather than trust what it was
			// last brought to.
			delete(st.nodes, n.Name)
			errs = append(errs, err)
			continue
		}
		st.nodes[n.Name] = results[i].programmed
	}
	return errors.Join(errs...)
}

// maxConcurrentNodeSyncs bounds the nodes one sync programs at the same
// time, and so the commands it has in flight on the engine.
const maxConcurrentNodeSyncs = 10

// nodeResult is what syncNode brought one node to.
type nodeResult struct {
	programmed programmed
	err        error
}

// forgetAllBut drops what is remembered of node containers that are gone.
// The caller holds st.sync.
func (st *clusterState) forgetAllBut(running map[string]engines.Owned) {
	for name := range st.nodes {
		if _, ok := running[name]; !ok {
			delete(st.nodes, name)
		}
	}
	st.mu.Lock()
	for name := range st.starts {
		if _, ok := running[name]; !ok {
			delete(st.starts, name)
		}
	}
	st.mu.Unlock()
}

func (st *clusterState) startsOf(name string) uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.starts[name]
}

// syncNode brings one node to its CNI configuration, masquerade rule and
// its routes of table, from p, what it was last brought to (known says
// there is such a record), and returns what it brought the node to. The
// caller holds st.sync.
func (s *Syncer) syncNode(ctx context.Context, st *clusterState, c engines.Owned, owner container.Owner, n Node, p programmed, known bool, table *RouteTable, clusterCIDRs []netip.Prefix, mtu int) (programmed, error) {
	now := s.clock.Now()
	verifyInterval := s.VerifyInterval
	if verifyInterval == 0 {
		verifyInterval = DefaultVerifyInterval
	}
	// Read before the commands below: a start seen while they run makes
	// the next sync program the node again.
	starts := st.startsOf(n.Name)
	trusted := known && p.id == c.ID && p.starts == starts && slices.Equal(p.podCIDRs, n.PodCIDRs) && now.Sub(p.verified) < verifyInterval
	if trusted && p.table == table {
		// Brought to these very routes, and trusted: nothing to do, and no
		// route list to build.
		return p, nil
	}
	var current []Route
	if trusted {
		current = p.table.For(n.Name)
	} else {
		if len(n.PodCIDRs) > 0 {
			if err := writeCNIConfig(ctx, c.Runtime, n.Name, owner, n.PodCIDRs, mtu); err != nil {
				return programmed{}, err
			}
		}
		out, err := exec(ctx, c.Runtime, n.Name, owner, ProbeCommand(n.PodCIDRs, clusterCIDRs))
		if err != nil {
			return programmed{}, err
		}
		current = ParseRoutes(out)
		p = programmed{id: c.ID, starts: starts, podCIDRs: n.PodCIDRs, verified: now}
	}
	add, del := DiffRoutes(current, table.For(n.Name), clusterCIDRs)
	if cmd := ApplyCommand(add, del); cmd != nil {
		if _, err := exec(ctx, c.Runtime, n.Name, owner, cmd); err != nil {
			return programmed{}, err
		}
		ctrl.LoggerFrom(ctx).Info("Synced pod CIDR routes", "Container", n.Name, "Added", len(add), "Removed", len(del))
	}
	p.table = table
	return p, nil
}

// ConfigureNode writes the CNI configuration of one node container of the
// cluster for its pod CIDRs, at once. Node IPAM calls it right after it
// assigns a Node its CIDRs (lifecycle.Initialization): the kubelet reports
// the Node Ready only once the configuration is there, and the cluster's
// next Sync, which would write it too, may be seconds away behind the
// routes of every other node of a scale-out. The routes to and from the
// node, and its masquerade rule, stay the Sync's; until they are in place
// the node's pods reach only the node's own.
func (s *Syncer) ConfigureNode(ctx context.Context, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster, rt container.Runtime, name string, owner container.Owner, cidrs []netip.Prefix) error {
	mtu, err := s.podMTU(ctx, s.state(client.ObjectKeyFromObject(cluster)), cluster, cc)
	if err != nil {
		return err
	}
	return writeCNIConfig(ctx, rt, name, owner, cidrs, mtu)
}

// podMTU returns the pods' MTU for cc's nodes: the MTU of the overlay
// network of a cluster on several engines, read from its first engine once
// (it never changes), and 0 (ptp's default, a veth's 1500) for a cluster
// on one engine's bridge network. Two first callers may both read it; they
// read the same.
func (s *Syncer) podMTU(ctx context.Context, st *clusterState, cluster *clusterv1.Cluster, cc *infrav1.ContainerCluster) (int, error) {
	st.mu.Lock()
	mtu, known := st.mtu, st.mtuKnown
	st.mu.Unlock()
	if known || len(s.engines.ForCluster(cc)) < 2 {
		return mtu, nil
	}
	rt, err := engines.FirstEngine(s.engines, cc)
	if err != nil {
		return 0, err
	}
	name := naming.NetworkName(cluster, cc)
	n, err := rt.InspectNetwork(ctx, name)
	if err != nil {
		return 0, fmt.Errorf("failed to read the MTU of network %s of Cluster %s: %w", name, klog.KObj(cluster), err)
	}
	st.mu.Lock()
	st.mtu, st.mtuKnown = n.MTU, true
	st.mu.Unlock()
	return n.MTU, nil
}

// writeCNIConfig writes the node's CNI configuration unless it already has
// it.
func writeCNIConfig(ctx context.Context, rt container.Runtime, name string, owner container.Owner, cidrs []netip.Prefix, mtu int) error {
	want, err := CNIConfig(cidrs, mtu)
	if err != nil {
		return err
	}
	have, err := rt.ReadFile(ctx, name, owner, CNIConfigPath)
	switch {
	case err == nil && bytes.Equal(have, want):
		return nil
	case err != nil && !container.IsNotFound(err):
		return fmt.Errorf("failed to read %s in container %s: %w", CNIConfigPath, name, err)
	}
	if err := rt.WriteFile(ctx, name, owner, CNIConfigPath, want, 0o644); err != nil {
		return fmt.Errorf("failed to write %s in container %s: %w", CNIConfigPath, name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Wrote the node's CNI config", "Container", name, "Path", CNIConfigPath)
	return nil
}

func exec(ctx context.Context, rt container.Runtime, name string, owner container.Owner, cmd []string) (string, error) {
	res, err := rt.Exec(ctx, name, owner, container.ExecInput{Cmd: cmd})
	what := strings.Join(cmd, " ")
	if len(cmd) > 3 && cmd[0] == "sh" {
		// The script itself is long and the same every time; its
		// arguments say what it did.
		what = strings.Join(cmd[4:], " ")
	}
	if err != nil {
		return "", fmt.Errorf("failed to program the pod network (%s) in container %s: %w", what, name, err)
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("failed to program the pod network (%s) in container %s: exit code %d: %s", what, name, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return string(res.Stdout), nil
}
