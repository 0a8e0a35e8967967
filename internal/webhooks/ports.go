package webhooks

import (
	"context"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/clusters"
	"github.com/capct/cluster-api-provider-container/internal/engines"
	"github.com/capct/cluster-api-provider-container/internal/policy"
)

// hostPortsTaken refuses each host port of m, a ContainerMachine being
// created, that another ContainerMachine publishes which runs, or may be
// placed, on the same engine: the engine would refuse to start the second
// container (docs/port-mappings.md). Host ports are the host's, so machines
// of every namespace count; one of another namespace is not named.
//
// Where a machine runs is known once CAPCT places it (its engine
// annotation), which is after its admission, so until then a machine may
// run on any engine its cluster lists, or on any engine at all when its
// cluster is not known yet; engines are told apart by their endpoint. So
// a template with host ports runs one machine per engine, and one on a
// cluster across engines one machine in all. Machines being deleted do not
// count: their containers go soon, and a rollout that deletes first must
// go on; a machine whose port is still held when it starts waits
// (HostPortInUse), as one admitted in the same instant as another does.
//
// It lists every ContainerMachine, uncached, but only for a machine that
// publishes ports, which most do not.
func (v *containerMachineValidator) hostPortsTaken(ctx context.Context, m *infrav1.ContainerMachine) (field.ErrorList, error) {
	if len(m.Spec.ExtraPortMappings) == 0 {
		return nil, nil
	}
	list := &infrav1.ContainerMachineList{}
	if err := v.reader.List(ctx, list); err != nil {
		return nil, apierrors.NewInternalError(fmt.Errorf("failed to list the ContainerMachines to check the host ports of ContainerMachine %s/%s: %w",
			m.Namespace, m.Name, err))
	}
	p := &placements{reader: v.reader, clusters: map[types.NamespacedName]engineSet{}, hosts: map[string]string{}}
	mine, err := p.of(ctx, m)
	if err != nil {
		return nil, err
	}
	var errs field.ErrorList
	taken := make([]bool, len(m.Spec.ExtraPortMappings))
	for i := range list.Items {
		other := &list.Items[i]
		if other.Namespace == m.Namespace && other.Name == m.Name || !other.DeletionTimestamp.IsZero() || len(other.Spec.ExtraPortMappings) == 0 {
			continue
		}
		theirs, err := p.of(ctx, other)
		if err != nil {
			return nil, err
		}
		if !mine.meets(theirs) {
			continue
		}
		for j, pm := range m.Spec.ExtraPortMappings {
			if taken[j] || !slices.ContainsFunc(other.Spec.ExtraPortMappings, func(q infrav1.PortMapping) bool { return policy.HostPortsOverlap(pm, q) }) {
				continue
			}
			taken[j] = true
			errs = append(errs, field.Forbidden(field.NewPath("spec", "extraPortMappings").Index(j).Child("hostPort"), fmt.Sprintf(
				"host port %s is published by %s, which runs or may run on the same engine as this machine (%s): "+
					"a host port serves one machine per engine, so a template or pool with host ports runs one machine per engine; "+
					"delete that machine first, or publish another port",
				policy.Describe(pm), describeMachine(other, m.Namespace), mine.meeting(theirs))))
		}
	}
	return errs, nil
}

// describeMachine names a ContainerMachine in a message to a user of
// namespace: one of another namespace is not named, as its user need not
// be known to them.
func describeMachine(m *infrav1.ContainerMachine, namespace string) string {
	if m.Namespace != namespace {
		return "a ContainerMachine of another namespace"
	}
	return "ContainerMachine " + m.Name
}

// engineSet is where a machine runs or may be placed: the hosts of
// engines, by endpoint (engines.Local's is ""), or any when that is not
// known yet.
type engineSet struct {
	any   bool
	hosts []string
	// names are the engines as the machine or its cluster names them.
	names []string
}

func (s engineSet) meets(o engineSet) bool {
	return s.any || o.any || slices.ContainsFunc(s.hosts, func(h string) bool { return slices.Contains(o.hosts, h) })
}

// meeting says, for a message, where s and o meet.
func (s engineSet) meeting(o engineSet) string {
	switch {
	case s.any:
		return "this machine's cluster and engine are not known yet"
	case o.any:
		return "that machine's cluster and engine are not known yet"
	}
	var named []string
	for i, h := range s.hosts {
		if slices.Contains(o.hosts, h) {
			named = append(named, describeEngine(s.names[i]))
		}
	}
	return strings.Join(named, ", ")
}

func describeEngine(name string) string {
	if name == engines.Local {
		return "the manager's engine"
	}
	return "engine " + name
}

// placements finds where machines run or may be placed, reading each
// Cluster and ContainerEngine once.
type placements struct {
	reader   client.Reader
	clusters map[types.NamespacedName]engineSet
	// hosts holds each engine's endpoint by name.
	hosts map[string]string
}

// of returns where m runs (its engine annotation) or may be placed (the
// engines its cluster lists, or the manager's own when it lists none); any
// engine when its Cluster or ContainerCluster is not known.
func (p *placements) of(ctx context.Context, m *infrav1.ContainerMachine) (engineSet, error) {
	if name, placed := m.Annotations[infrav1.EngineAnnotation]; placed {
		return p.set(ctx, []string{name})
	}
	name := m.Labels[clusterv1.ClusterNameLabel]
	if name == "" {
		return engineSet{any: true}, nil
	}
	key := types.NamespacedName{Namespace: m.Namespace, Name: name}
	if s, ok := p.clusters[key]; ok {
		return s, nil
	}
	s := engineSet{any: true}
	cluster := &clusterv1.Cluster{}
	err := p.reader.Get(ctx, key, cluster)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return engineSet{}, apierrors.NewInternalError(fmt.Errorf("failed to get Cluster %s of ContainerMachine %s/%s: %w", key, m.Namespace, m.Name, err))
	default:
		cc, err := clusters.ContainerCluster(ctx, p.reader, cluster)
		if err != nil {
			return engineSet{}, apierrors.NewInternalError(err)
		}
		if cc != nil {
			names := engines.Listed(cc)
			if len(names) == 0 {
				names = []string{engines.Local}
			}
			if s, err = p.set(ctx, names); err != nil {
				return engineSet{}, err
			}
		}
	}
	p.clusters[key] = s
	return s, nil
}

// set is the engines names, each with its host: the endpoint of the
// ContainerEngine of that name, "" for the manager's own engine (also
// named by a ContainerEngine with an empty endpoint), and the name itself
// for an engine that does not exist (yet).
func (p *placements) set(ctx context.Context, names []string) (engineSet, error) {
	s := engineSet{names: names}
	for _, name := range names {
		host, ok := p.hosts[name]
		if !ok && name != engines.Local {
			e := &infrav1.ContainerEngine{}
			err := p.reader.Get(ctx, client.ObjectKey{Name: name}, e)
			switch {
			case apierrors.IsNotFound(err):
				host = "engine:" + name
			case err != nil:
				return engineSet{}, apierrors.NewInternalError(fmt.Errorf("failed to get ContainerEngine %s: %w", name, err))
			default:
				host = e.Spec.Endpoint
			}
			p.hosts[name] = host
		}
		s.hosts = append(s.hosts, host)
	}
	return s, nil
}
