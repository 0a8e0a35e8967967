package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	goruntime "runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// capctControllers are the controller names of CAPCT's reconcilers in
// controller-runtime's metrics; every other name is Cluster API's.
var capctControllers = []string{"containercluster", "containermachine", "containermachinepool"}

// result is one run, as written to scale.json.
type result struct {
	Machines int    `json:"machines"`
	Clusters int    `json:"clusters"`
	Date     string `json:"date"`
	Host     string `json:"host"`
	Go       string `json:"go"`
	// LoadAverage is the host's 1-minute load average at the start and the
	// end: the machine is shared, and other work slows the API server.
	LoadAverage [2]string `json:"loadAverage"`
	// MaxConcurrentBootstraps is the manager's --max-concurrent-bootstraps.
	MaxConcurrentBootstraps int `json:"maxConcurrentBootstraps"`
	// StripManagedFields: the caches dropped metadata.managedFields.
	StripManagedFields bool `json:"stripManagedFields"`
	// Seconds from the first object's creation: created (all objects
	// written), provisioned, initialized, ready (every ContainerMachine),
	// machinesRunning (every Cluster API Machine).
	Seconds map[string]float64 `json:"seconds"`
	// Reached counts the machines that reached each milestone (all of
	// them, unless the run failed).
	Reached map[string]int `json:"reached"`
	// Reconciles per controller (controller_runtime_reconcile_total).
	Reconciles map[string]int `json:"reconciles"`
	// ReconcilesPerSecond over the time to all ready, CAPCT's controllers
	// and Cluster API's.
	ReconcilesPerSecond map[string]float64 `json:"reconcilesPerSecond"`
	// Requests are counted by a wrapping http.RoundTripper on the
	// managers' REST configs (management cluster) and by the workload
	// proxy (the ClusterCaches' requests to the workload clusters).
	Requests map[string]requestStats `json:"requests"`
	// RequestsPerMachine are total requests per machine by source.
	RequestsPerMachine map[string]float64 `json:"requestsPerMachine"`
	// NodeCommands are the Execs in node containers (bootstrap and the pod
	// network) on the fake engine.
	NodeCommands int `json:"nodeCommands"`
	// BaselineHeapMiB and BaselineRSSMiB are the live heap (after a
	// collection) and the resident set once the manager runs, before the
	// first object is created.
	BaselineHeapMiB  float64  `json:"baselineHeapMiB"`
	BaselineRSSMiB   float64  `json:"baselineRSSMiB"`
	PeakHeapMiB      float64  `json:"peakHeapMiB"`
	PeakHeapInuseMiB float64  `json:"peakHeapInuseMiB"`
	PeakGoSysMiB     float64  `json:"peakGoSysMiB"`
	PeakRSSMiB       float64  `json:"peakRSSMiB"`
	RSSAtEndMiB      float64  `json:"rssAtEndMiB"`
	Profiles         []string `json:"profiles"`
	Error            string   `json:"error,omitempty"`
}

func newResult(o options) *result {
	return &result{
		Machines: o.machines, Clusters: o.clusters, Date: time.Now().UTC().Format(time.RFC3339),
		Host: fmt.Sprintf("%d CPUs, %s", goruntime.NumCPU(), cpuModel()), Go: goruntime.Version(),
		LoadAverage: [2]string{loadAverage()}, MaxConcurrentBootstraps: o.maxConcurrentBootstraps, StripManagedFields: o.stripManagedFields,
		Seconds: map[string]float64{}, Reached: map[string]int{}, Reconciles: map[string]int{},
		ReconcilesPerSecond: map[string]float64{}, Requests: map[string]requestStats{}, RequestsPerMachine: map[string]float64{},
	}
}

// collect reads the counters once the machines are done.
func (r *result) collect(b *bench) {
	families, err := metrics.Registry.Gather()
	if err == nil {
		for _, f := range families {
			if f.GetName() != "controller_runtime_reconcile_total" {
				continue
			}
			for _, m := range f.GetMetric() {
				r.Reconciles[label(m, "controller")] += int(m.GetCounter().GetValue())
			}
		}
	}
	var capct, capi int
	for name, n := range r.Reconciles {
		if slices.Contains(capctControllers, name) {
			capct += n
		} else {
			capi += n
		}
	}
	if s := r.Seconds["ready"]; s > 0 {
		r.ReconcilesPerSecond["capct"] = float64(capct) / s
		r.ReconcilesPerSecond["clusterAPI"] = float64(capi) / s
	}
	for name, agent := range map[string]string{
		"capct": capctAgent, "clusterAPI": capiAgent,
		"capctWorkload": workloadPrefix + capctAgent, "clusterAPIWorkload": workloadPrefix + capiAgent,
	} {
		s := b.requests.stats(agent)
		r.Requests[name] = s
		r.RequestsPerMachine[name] = float64(s.Total) / float64(r.Machines)
		r.RequestsPerMachine[name+"Writes"] = float64(s.Writes) / float64(r.Machines)
	}
	b.execMu.Lock()
	r.NodeCommands = b.execs
	b.execMu.Unlock()
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// loadAverage is the first field of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Fields(string(b))[0]
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return goruntime.GOARCH
	}
	defer func() { _ = f.Close() }() // read only: closing loses nothing
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return goruntime.GOARCH
}

// merge replaces the run of the same size in path and returns all runs,
// smallest first, so that one file holds the sizes of one make bench-scale.
func merge(path string, r *result) ([]*result, error) {
	var all []*result
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &all); err != nil {
			return nil, fmt.Errorf("failed to read %s (remove it to start over): %w", path, err)
		}
	}
	all = slices.DeleteFunc(all, func(o *result) bool { return o.Machines == r.Machines })
	all = append(all, r)
	slices.SortFunc(all, func(a, b *result) int { return a.Machines - b.Machines })
	b, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("failed to encode the results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("failed to write %s: %w", path, err)
	}
	return all, nil
}

// printTable prints the runs side by side; "ms/machine" is the time to all
// provisioned divided by the count, flat when time grows linearly.
func printTable(w io.Writer, all []*result) {
	// The table only repeats scale.json for the eye: an error writing it
	// (stdout closed) is not worth failing a finished run for.
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "machines\tprovisioned s\tms/machine\tinitialized s\tready s\tRunning s\tCAPCT rec/s\tCAPCT req/machine\tCAPCT writes/machine\tworkload req/machine\tCAPI req/machine\tpeak heap MiB\tbase RSS MiB\tpeak RSS MiB\t")
	for _, r := range all {
		_, _ = fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%.0f\t%.0f\t\n", r.Machines,
			r.Seconds["provisioned"], 1000*r.Seconds["provisioned"]/float64(r.Machines), r.Seconds["initialized"], r.Seconds["ready"],
			r.Seconds["machinesRunning"], r.ReconcilesPerSecond["capct"], r.RequestsPerMachine["capct"], r.RequestsPerMachine["capctWrites"],
			r.RequestsPerMachine["capctWorkload"], r.RequestsPerMachine["clusterAPI"], r.PeakHeapMiB, r.BaselineRSSMiB, r.PeakRSSMiB)
	}
	_ = tw.Flush()
}
