package main

import (
	"reflect"
	"testing"
)

func ptr(v float64) *float64 { return &v }

func TestKindLabel(t *testing.T) {
	tests := []struct {
		k    kindWrites
		want string
	}{
		{kindWrites{Resource: "containermachines/status", Verb: "patch"}, "InfraMachines/status patch"},
		{kindWrites{Resource: "dockermachines/status", Verb: "patch"}, "InfraMachines/status patch"},
		{kindWrites{Resource: "dockermachinepools", Verb: "patch"}, "InfraMachinePools patch"},
		{kindWrites{Resource: "containerclusters/status", Verb: "patch"}, "InfraClusters/status patch"},
		{kindWrites{Resource: "events", Verb: "create"}, "events create"},
		{kindWrites{Resource: "leases", Verb: "update"}, "leases update"},
		{kindWrites{Resource: "machines/status", Verb: "patch"}, "machines/status patch"},
		{kindWrites{Resource: "", Verb: "create"}, "(no resource) create"},
	}
	for _, tt := range tests {
		if got := kindLabel(tt.k); got != tt.want {
			t.Errorf("kindLabel(%+v) = %q, want %q", tt.k, got, tt.want)
		}
	}
}

// rowsOf flattens rows for comparison: label, CAPCT's and CAPD's value, -1
// for nil.
func rowsOf(rows []barRow) [][3]any {
	v := func(p *float64) float64 {
		if p == nil {
			return -1
		}
		return *p
	}
	out := make([][3]any, 0, len(rows))
	for _, r := range rows {
		out = append(out, [3]any{r.label, v(r.values["capct"]), v(r.values["capd"])})
	}
	return out
}

func TestBarRows(t *testing.T) {
	kinds := []kindWrites{
		{Resource: "events", Verb: "create", CAPCT: ptr(4.5), CAPD: ptr(2.25)},
		{Resource: "containermachines/status", Verb: "patch", CAPCT: ptr(8.5), CAPD: ptr(0)},
		{Resource: "dockermachines/status", Verb: "patch", CAPCT: ptr(0), CAPD: ptr(4.5)},
		{Resource: "leases", Verb: "update", CAPCT: ptr(8.5), CAPD: ptr(9)},
		{Resource: "secrets", Verb: "update", CAPCT: ptr(0.25), CAPD: ptr(0)},
		{Resource: "containerclusters/status", Verb: "patch", CAPCT: ptr(0.25), CAPD: ptr(0)},
	}
	tests := []struct {
		name  string
		kinds []kindWrites
		limit int
		want  [][3]any
	}{
		{
			name:  "the providers' own kinds share a row, largest first",
			kinds: kinds, limit: 10,
			want: [][3]any{
				{"leases update", 8.5, 9.0},
				{"InfraMachines/status patch", 8.5, 4.5},
				{"events create", 4.5, 2.25},
				{"InfraClusters/status patch", 0.25, 0.0},
				{"secrets update", 0.25, 0.0},
			},
		},
		{
			name:  "beyond the limit, one row of the others",
			kinds: kinds, limit: 2,
			want: [][3]any{
				{"leases update", 8.5, 9.0},
				{"InfraMachines/status patch", 8.5, 4.5},
				{"other kinds (3)", 5.0, 2.25},
			},
		},
		{
			name:  "a provider without a scale-out stays nil",
			kinds: []kindWrites{{Resource: "events", Verb: "create", CAPCT: ptr(5)}},
			limit: 10,
			want:  [][3]any{{"events create", 5.0, -1.0}},
		},
		{name: "no kinds", kinds: nil, limit: 10, want: [][3]any{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rowsOf(barRows(tt.kinds, tt.limit)); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("barRows = %v, want %v", got, tt.want)
			}
		})
	}
}
