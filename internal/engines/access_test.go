package engines

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

func TestAllowsNamespace(t *testing.T) {
	teamA := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"capct.example/engines": "shared"}}}
	teamB := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}}
	shared := &metav1.LabelSelector{MatchLabels: map[string]string{"capct.example/engines": "shared"}}
	testCases := []struct {
		name    string
		allowed *infrav1.AllowedNamespaces
		ns      *corev1.Namespace
		want    bool
		wantErr bool
	}{
		{name: "unset allows none", allowed: nil, ns: teamA, want: false},
		{name: "the empty object allows all", allowed: &infrav1.AllowedNamespaces{}, ns: teamB, want: true},
		{name: "listed", allowed: &infrav1.AllowedNamespaces{List: []string{"team-b", "team-a"}}, ns: teamA, want: true},
		{name: "not listed", allowed: &infrav1.AllowedNamespaces{List: []string{"team-a"}}, ns: teamB, want: false},
		{name: "an empty list allows none", allowed: &infrav1.AllowedNamespaces{List: []string{}}, ns: teamA, want: false},
		{name: "an empty selector allows none", allowed: &infrav1.AllowedNamespaces{Selector: &metav1.LabelSelector{}}, ns: teamA, want: false},
		{name: "selected by label", allowed: &infrav1.AllowedNamespaces{Selector: shared}, ns: teamA, want: true},
		{name: "not selected by label", allowed: &infrav1.AllowedNamespaces{Selector: shared}, ns: teamB, want: false},
		{name: "listed though not selected", allowed: &infrav1.AllowedNamespaces{List: []string{"team-b"}, Selector: shared}, ns: teamB, want: true},
		{name: "selected though not listed", allowed: &infrav1.AllowedNamespaces{List: []string{"team-c"}, Selector: shared}, ns: teamA, want: true},
		{name: "a selector that does not parse", allowed: &infrav1.AllowedNamespaces{Selector: &metav1.LabelSelector{
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Near", Values: []string{"a"}}},
		}}, ns: teamA, want: false, wantErr: true},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			engine := &infrav1.ContainerEngine{ObjectMeta: metav1.ObjectMeta{Name: "engine-b"}}
			engine.Spec.AllowedNamespaces = tc.allowed
			got, err := AllowsNamespace(engine, tc.ns)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error = %v, want an error: %t", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("AllowsNamespace(%s) = %t, want %t", tc.ns.Name, got, tc.want)
			}
		})
	}
}

// TestLocalAllowsNamespace covers who may run on the manager's own engine
// by listing no engines: everyone while the manager sets nothing, then
// only whom its flags list or select.
func TestLocalAllowsNamespace(t *testing.T) {
	teamA := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", Labels: map[string]string{"capct.io/local-engine": "allowed"}}}
	teamB := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-b"}}
	local := &metav1.LabelSelector{MatchLabels: map[string]string{"capct.io/local-engine": "allowed"}}
	testCases := []struct {
		name    string
		allowed *infrav1.AllowedNamespaces
		ns      *corev1.Namespace
		want    bool
	}{
		{name: "no flags allow all", allowed: nil, ns: teamB, want: true},
		{name: "listed", allowed: &infrav1.AllowedNamespaces{List: []string{"team-b"}}, ns: teamB, want: true},
		{name: "not listed", allowed: &infrav1.AllowedNamespaces{List: []string{"team-a"}}, ns: teamB, want: false},
		{name: "selected", allowed: &infrav1.AllowedNamespaces{Selector: local}, ns: teamA, want: true},
		{name: "not selected", allowed: &infrav1.AllowedNamespaces{Selector: local}, ns: teamB, want: false},
		{name: "listed though not selected", allowed: &infrav1.AllowedNamespaces{List: []string{"team-b"}, Selector: local}, ns: teamB, want: true},
		{name: "an empty list allows none", allowed: &infrav1.AllowedNamespaces{List: []string{}}, ns: teamA, want: false},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LocalAllowsNamespace(tc.allowed, tc.ns)
			if err != nil {
				t.Fatalf("LocalAllowsNamespace(%s): %v", tc.ns.Name, err)
			}
			if got != tc.want {
				t.Errorf("LocalAllowsNamespace(%s) = %t, want %t", tc.ns.Name, got, tc.want)
			}
		})
	}
}
