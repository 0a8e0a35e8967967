package nodeipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/klog/v2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/clusters"
	"github.com/capct/cluster-api-provider-container/internal/container"
	"github.com/capct/cluster-api-provider-container/internal/ipam"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// SyncRoutes makes every running node container of the cluster route each
// other node's pod CIDRs through that node's address on the cluster
// network, and removes routes into the cluster's pod network that no node
// holds any more. It reads each container's routes once per family and
// only runs `ip route replace`/`ip route del` for what differs. Call it
// after a machine's container is deleted and periodically; AssignPodCIDRs
// calls it after every assignment. It does nothing when node IPAM is off.
func (a *Assigner) SyncRoutes(ctx context.Context, cluster *clusterv1.Cluster) error {
	cc, err := clusters.ContainerCluster(ctx, a.reader, cluster)
	if err != nil {
		return err
	}
	cfg, enabled, _, err := ClusterConfig(cluster, cc)
	if err != nil || !enabled {
		return err
	}
	owner := naming.ClusterOwner(cluster, cc)
	if !owner.Valid() {
		// No cluster ID yet, so no container of the cluster yet either.
		return nil
	}
	return a.syncRoutes(ctx, cluster, owner, cfg, "")
}

// syncRoutes syncs the cluster's routes. With self set, only an error in
// that container is returned (the others are logged and left to their own
// syncs), so one broken node does not hold up another's initialization.
func (a *Assigner) syncRoutes(ctx context.Context, cluster *clusterv1.Cluster, owner container.Owner, cfg ipam.Config, self string) error {
	log := ctrl.LoggerFrom(ctx)
	st := a.state(cluster)
	st.routes.Lock()
	defer st.routes.Unlock()

	machines := &infrav1.ContainerMachineList{}
	if err := a.reader.List(ctx, machines, client.InNamespace(cluster.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: cluster.Name}); err != nil {
		return fmt.Errorf("failed to list the ContainerMachines of Cluster %s: %w", klog.KObj(cluster), err)
	}
	cidrsOf := map[string][]netip.Prefix{}
	for i := range machines.Items {
		cm := &machines.Items[i]
		cidrs, _ := ParsePodCIDRs(cm.Annotations[infrav1.PodCIDRsAnnotation])
		cidrsOf[cm.Namespace+"/"+cm.Name] = cidrs
	}
	containers, err := container.ListOwned(ctx, a.runtime, owner, nil)
	if err != nil {
		return fmt.Errorf("failed to list the containers of Cluster %s: %w", klog.KObj(cluster), err)
	}
	var nodes []Node
	owners := map[string]container.Owner{}
	for _, c := range containers {
		if !container.Role(c.Labels[container.LabelRole]).IsNode() || c.State != container.StateRunning {
			continue
		}
		machine := c.Labels[container.LabelMachine]
		owners[c.Name] = owner.ForMachine(machine)
		nodes = append(nodes, Node{Name: c.Name, IPv4: c.IPv4, IPv6: c.IPv6, PodCIDRs: cidrsOf[cluster.Namespace+"/"+machine]})
	}
	desired := DesiredRoutes(nodes)
	var errs []error
	for _, n := range nodes {
		err := a.syncNodeRoutes(ctx, n, owners[n.Name], desired[n.Name], cfg.ClusterCIDRs)
		switch {
		case err == nil:
		case self == "" || n.Name == self:
			errs = append(errs, err)
		default:
			log.Error(err, "Failed to sync the routes of another node; its next sync retries", "Container", n.Name)
		}
	}
	return errors.Join(errs...)
}

// syncNodeRoutes brings one node's routes to desired, and makes sure the
// node masquerades its pods' traffic leaving the cluster's pod network. The
// masquerade rule is checked on every sync because a restarted container
// loses it while keeping its CNI config.
func (a *Assigner) syncNodeRoutes(ctx context.Context, n Node, owner container.Owner, desired []Route, clusterCIDRs []netip.Prefix) error {
	name := n.Name
	if cmd := MasqueradeCommand(n.PodCIDRs, clusterCIDRs); cmd != nil {
		if _, err := a.exec(ctx, name, owner, cmd); err != nil {
			return err
		}
	}
	var current []Route
	for _, fam := range families(clusterCIDRs) {
		cmd := []string{"ip", "-o", "route", "show"}
		if fam == 6 {
			cmd = []string{"ip", "-o", "-6", "route", "show"}
		}
		out, err := a.exec(ctx, name, owner, cmd)
		if err != nil {
			return err
		}
		current = append(current, ParseRoutes(out)...)
	}
	add, del := DiffRoutes(current, desired, clusterCIDRs)
	var errs []error
	for _, r := range add {
		if _, err := a.exec(ctx, name, owner, r.Command("replace")); err != nil {
			errs = append(errs, err)
		}
	}
	for _, r := range del {
		if _, err := a.exec(ctx, name, owner, r.Command("del")); err != nil {
			errs = append(errs, err)
		}
	}
	if len(add)+len(del) > 0 {
		ctrl.LoggerFrom(ctx).Info("Synced pod CIDR routes", "Container", name, "Added", len(add), "Removed", len(del))
	}
	return errors.Join(errs...)
}

func families(cidrs []netip.Prefix) []int {
	var out []int
	for _, c := range cidrs {
		if c.Addr().Is4() {
			out = append(out, 4)
		} else {
			out = append(out, 6)
		}
	}
	return out
}

func (a *Assigner) exec(ctx context.Context, name string, owner container.Owner, cmd []string) (string, error) {
	res, err := a.runtime.Exec(ctx, name, owner, container.ExecInput{Cmd: cmd})
	if err != nil {
		return "", fmt.Errorf("failed to run %q in container %s: %w", strings.Join(cmd, " "), name, err)
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("failed to run %q in container %s: exit code %d: %s", strings.Join(cmd, " "), name, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return string(res.Stdout), nil
}
