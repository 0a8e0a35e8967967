package main

import (
	"encoding/json"
	"net/url"
	"reflect"
	"testing"
)

// Cluster API's process's counts, handed over as JSON, add to the
// parent's: its own keys appear as they were, keys both counted are
// summed, and stats by agent read them as if one counter had counted all.
func TestRequestCounterSnapshotMerge(t *testing.T) {
	child := newRequestCounter()
	u := &url.URL{Path: "/apis/cluster.x-k8s.io/v1beta2/namespaces/ns/machines/m/status"}
	k := child.add("", capiAgent, "PATCH", u)
	child.add("", capiAgent, "PATCH", u)
	child.add("", capiAgent, "GET", &url.URL{Path: "/apis/cluster.x-k8s.io/v1beta2/machines", RawQuery: "watch=true"})
	child.bytes[k] = 300

	b, err := json.Marshal(child.snapshot())
	if err != nil {
		t.Fatal(err)
	}
	var recs []requestRecord
	if err := json.Unmarshal(b, &recs); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(recs, child.snapshot()) {
		t.Fatalf("records changed through JSON: %s", b)
	}

	parent := newRequestCounter()
	parent.add("", capctAgent, "GET", &url.URL{Path: "/api/v1/namespaces/ns/secrets/s"})
	parent.add(workloadPrefix, capiAgent, "GET", &url.URL{Path: "/api/v1/nodes"})
	parent.add("", capiAgent, "PATCH", u) // as if both had counted it
	parent.merge(recs)

	capi := parent.stats(capiAgent)
	if capi.Total != 4 || capi.Writes != 3 || capi.ByVerbResource["patch machines/status"] != 3 || capi.ByVerbResource["watch machines"] != 1 {
		t.Errorf("Cluster API's stats after the merge = %+v", capi)
	}
	if want := 300.0 / mib; capi.ResponseMiB != want {
		t.Errorf("Cluster API's response MiB = %v, want %v", capi.ResponseMiB, want)
	}
	if s := parent.stats(capctAgent); s.Total != 1 {
		t.Errorf("CAPCT's stats changed by the merge: %+v", s)
	}
	if s := parent.stats(workloadPrefix + capiAgent); s.Total != 1 {
		t.Errorf("workload stats changed by the merge: %+v", s)
	}
}
