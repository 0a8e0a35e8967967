package nodeipam

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// OverlayRecheck is how long a record this manager knows from the API server
// is trusted over a cache that shows something else for the same object.
// After it, the record is read again from the API server: an informer does
// not lag this long unless its watch broke, and someone (a person, or a
// manager that led before this one) may have changed the record since.
const OverlayRecheck = time.Minute

// pending is a record this manager knows the API server holds and its
// cache may not show yet: one it wrote (a ContainerMachine's pod-cidrs
// annotation, a Node's pod CIDRs) or one the first list of the cluster
// found. Until the cache shows it, every rebuild adds it, so nothing this
// manager knows is taken is handed out again because an informer lags.
type pending struct {
	// value is the annotation, or the Node's pod CIDRs joined with commas.
	value string
	// providerID is the machine's, so that a rebuild matches its Node.
	providerID string
	// checked is when this manager wrote or read the value at the API
	// server.
	checked time.Time
	// cached is true when the cache held the machine as the value was
	// written: its absence from the cache later is then its deletion, seen
	// after the write. A record from the first list may not be cached yet.
	// Nodes need no such flag: a Node is applied only as read from the
	// cache, so its absence there is always its deletion.
	cached bool
}

// withPendingMachines returns the cluster's ContainerMachines as the cache
// listed them, with the records this manager knows and the cache does not
// show laid over them. A record the cache shows is dropped from the
// overlay; one the cache has shown something else for since OverlayRecheck
// is read again from the API server. cached is never modified: its items
// may share maps with the informer's objects.
func (r *Recorder) withPendingMachines(ctx context.Context, st *clusterState, namespace string, cached []infrav1.ContainerMachine) ([]infrav1.ContainerMachine, error) {
	if len(st.machines) == 0 {
		return cached, nil
	}
	index := make(map[string]int, len(cached))
	for i := range cached {
		index[cached[i].Name] = i
	}
	out := cached
	copied := false
	now := r.now()
	for name, p := range st.machines {
		i, inCache := index[name]
		var cachedValue string
		if inCache {
			cachedValue = cached[i].Annotations[infrav1.PodCIDRsAnnotation]
		}
		switch {
		case inCache && cachedValue == p.value:
			delete(st.machines, name)
			continue
		case !inCache && p.cached:
			// Deleted after the write: the Node, if it was given the
			// CIDRs, keeps them reserved.
			delete(st.machines, name)
			continue
		case now.Sub(p.checked) >= OverlayRecheck:
			live := &infrav1.ContainerMachine{}
			err := r.reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, live)
			if apierrors.IsNotFound(err) {
				delete(st.machines, name)
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("failed to read the pod CIDR record of ContainerMachine %s: %w", klog.KRef(namespace, name), err)
			}
			value := live.Annotations[infrav1.PodCIDRsAnnotation]
			if inCache && value == cachedValue {
				delete(st.machines, name)
				continue
			}
			p = &pending{value: value, providerID: live.Spec.ProviderID, checked: now, cached: p.cached}
			st.machines[name] = p
		}
		if !copied {
			out = append([]infrav1.ContainerMachine(nil), cached...)
			copied = true
		}
		if inCache {
			m := &out[i]
			m.Annotations = maps.Clone(m.Annotations)
			if m.Annotations == nil {
				m.Annotations = map[string]string{}
			}
			m.Annotations[infrav1.PodCIDRsAnnotation] = p.value
			continue
		}
		m := infrav1.ContainerMachine{}
		m.Namespace, m.Name = namespace, name
		m.Annotations = map[string]string{infrav1.PodCIDRsAnnotation: p.value}
		m.Spec.ProviderID = p.providerID
		out = append(out, m)
	}
	return out, nil
}

// withPendingNodes returns the cluster's Nodes as the cache listed them,
// with the pod CIDRs this manager applied and the cache does not show yet.
// A Node gone from the cache was deleted after the apply (the apply needed
// it to exist), so its entry goes too. An entry older than OverlayRecheck
// goes whatever the cache shows: the workload cluster is read through its
// informers only, and one that has not shown an apply for that long has
// lost its watch, which the ClusterCache's health check replaces with a
// fresh list. cached is never modified.
func (st *clusterState) withPendingNodes(now time.Time, cached []corev1.Node) []corev1.Node {
	for name, p := range st.nodes {
		if now.Sub(p.checked) >= OverlayRecheck {
			delete(st.nodes, name)
		}
	}
	if len(st.nodes) == 0 {
		return cached
	}
	out := append([]corev1.Node(nil), cached...)
	seen := map[string]bool{}
	for i := range out {
		n := &out[i]
		p, ok := st.nodes[n.Name]
		if !ok {
			continue
		}
		seen[n.Name] = true
		if strings.Join(nodePodCIDRs(n), ",") == p.value {
			delete(st.nodes, n.Name)
			continue
		}
		n.Spec.PodCIDRs = strings.Split(p.value, ",")
		n.Spec.PodCIDR = n.Spec.PodCIDRs[0]
	}
	for name := range st.nodes {
		if !seen[name] {
			delete(st.nodes, name)
		}
	}
	return out
}
