package engines

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// AllowsNamespace reports whether engine lets ContainerClusters in ns run
// machines on it. It is the one answer to that question: the
// ContainerCluster webhook asks it at admission, and the controller will
// ask it on every pass, because an admin can narrow an engine afterwards.
//
// Access is granted, never assumed: unset allowedNamespaces allows none,
// and only the empty object ({}) allows every namespace. An empty list or
// a selector without terms selects none, so that `list: []` or
// `selector: {}` written to mean "nobody yet" does not open the engine to
// all (metav1.LabelSelectorAsSelector would read an empty selector as
// "everything"). A selector the API server let through but that does not
// parse is an error, and allows nothing.
func AllowsNamespace(engine *infrav1.ContainerEngine, ns *corev1.Namespace) (bool, error) {
	if engine.Spec.AllowedNamespaces == nil {
		return false, nil
	}
	allowed, err := selects(engine.Spec.AllowedNamespaces, ns)
	if err != nil {
		return false, fmt.Errorf("failed to parse spec.allowedNamespaces.selector of ContainerEngine %s: %w", engine.Name, err)
	}
	return allowed, nil
}

// LocalAllowsNamespace reports whether ContainerClusters in ns that list
// no engines may run machines on the manager's own engine, the engine of
// the host the manager runs on. allowed is what the manager's
// --local-engine-allowed-namespaces and --local-engine-namespace-selector
// say (policy.Policy.LocalEngineNamespaces). Unlike a ContainerEngine's,
// nil allows every namespace: a manager started without either flag runs
// every cluster it ran before they existed. Otherwise it is read as an
// engine's allowedNamespaces is.
func LocalAllowsNamespace(allowed *infrav1.AllowedNamespaces, ns *corev1.Namespace) (bool, error) {
	if allowed == nil {
		return true, nil
	}
	ok, err := selects(allowed, ns)
	if err != nil {
		return false, fmt.Errorf("failed to parse the manager's local engine namespace selector: %w", err)
	}
	return ok, nil
}

// selects reports whether allowed, which is not nil, selects ns: the
// empty object selects all; an empty list or a selector without terms
// selects none.
func selects(allowed *infrav1.AllowedNamespaces, ns *corev1.Namespace) (bool, error) {
	switch {
	case allowed.List == nil && allowed.Selector == nil:
		return true, nil
	case slices.Contains(allowed.List, ns.Name):
		return true, nil
	case allowed.Selector == nil || emptySelector(allowed.Selector):
		return false, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(allowed.Selector)
	if err != nil {
		return false, err
	}
	return selector.Matches(labels.Set(ns.Labels)), nil
}

func emptySelector(s *metav1.LabelSelector) bool {
	return len(s.MatchLabels) == 0 && len(s.MatchExpressions) == 0
}
