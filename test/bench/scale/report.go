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

// capiReconcilePrefix marks Cluster API's process's controllers in
// result.Reconciles: both processes have a ClusterCache controller of the
// same name.
const capiReconcilePrefix = "clusterAPI:"

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
	// Reconciles per controller (controller_runtime_reconcile_total of
	// each process): CAPCT's process's by name (its three controllers and
	// its ClusterCache's), Cluster API's prefixed "clusterAPI:".
	Reconciles map[string]int `json:"reconciles"`
	// ReconcilesPerSecond over the time to all ready, CAPCT's process's
	// controllers ("capct") and Cluster API's ("clusterAPI").
	ReconcilesPerSecond map[string]float64 `json:"reconcilesPerSecond"`
	// Requests are counted by a wrapping http.RoundTripper on each
	// manager's REST config (management cluster; Cluster API's process
	// counts its own and hands the counts over when it stops) and by the
	// workload proxy (the ClusterCaches' requests to the workload
	// clusters).
	Requests map[string]requestStats `json:"requests"`
	// RequestsPerMachine are total requests per machine by source.
	RequestsPerMachine map[string]float64 `json:"requestsPerMachine"`
	// NodeCommands are the Execs in node containers (bootstrap and the pod
	// network) on the fake engine.
	NodeCommands int `json:"nodeCommands"`
	// The memory figures below are CAPCT's process's: its manager, with
	// the fake engine, the simulated kubelets, the workload proxy and the
	// driver, which a real manager does not hold, so they bound the
	// manager's own from above. BaselineHeapMiB and BaselineRSSMiB are the
	// live heap (after a collection) and the resident set once the manager
	// runs, before the first object is created.
	BaselineHeapMiB  float64 `json:"baselineHeapMiB"`
	BaselineRSSMiB   float64 `json:"baselineRSSMiB"`
	PeakHeapMiB      float64 `json:"peakHeapMiB"`
	PeakHeapInuseMiB float64 `json:"peakHeapInuseMiB"`
	PeakGoSysMiB     float64 `json:"peakGoSysMiB"`
	PeakRSSMiB       float64 `json:"peakRSSMiB"`
	RSSAtEndMiB      float64 `json:"rssAtEndMiB"`
	// ClusterAPIProcess is the memory of Cluster API's process (its
	// Cluster and Machine reconcilers, its cache and ClusterCache), which
	// in a management cluster is another pod's; absent when the run
	// failed before it reported.
	ClusterAPIProcess *processMemory `json:"clusterAPIProcess,omitempty"`
	Profiles          []string       `json:"profiles"`
	Error             string         `json:"error,omitempty"`
}

// processMemory is another process's memory: the resident set once its
// caches synced, and its peak heap and resident set (VmHWM).
type processMemory struct {
	BaselineRSSMiB float64 `json:"baselineRSSMiB"`
	PeakHeapMiB    float64 `json:"peakHeapMiB"`
	PeakRSSMiB     float64 `json:"peakRSSMiB"`
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

// collect reads the counters once the machines are done; capi is Cluster
// API's process's report, nil when it gave none.
func (r *result) collect(b *bench, capi *childReport) {
	var capiReconciles map[string]int
	if capi != nil {
		capiReconciles = capi.Reconciles
		b.requests.merge(capi.Requests)
		r.ClusterAPIProcess = &processMemory{BaselineRSSMiB: capi.BaselineRSSMiB, PeakHeapMiB: capi.PeakHeapMiB, PeakRSSMiB: capi.PeakRSSMiB}
	}
	var capct, clusterAPI int
	r.Reconciles, capct, clusterAPI = mergeReconciles(reconcileTotals(), capiReconciles)
	if s := r.Seconds["ready"]; s > 0 {
		r.ReconcilesPerSecond["capct"] = float64(capct) / s
		r.ReconcilesPerSecond["clusterAPI"] = float64(clusterAPI) / s
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

// reconcileTotals is this process's controller_runtime_reconcile_total per
// controller, from controller-runtime's registry (filled whether or not a
// metrics server serves it).
func reconcileTotals() map[string]int {
	totals := map[string]int{}
	families, err := metrics.Registry.Gather()
	if err != nil {
		return totals
	}
	for _, f := range families {
		if f.GetName() != "controller_runtime_reconcile_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			totals[label(m, "controller")] += int(m.GetCounter().GetValue())
		}
	}
	return totals
}

// mergeReconciles puts both processes' reconciles in one map, Cluster
// API's prefixed, and sums each process's.
func mergeReconciles(capct, clusterAPI map[string]int) (all map[string]int, capctSum, clusterAPISum int) {
	all = map[string]int{}
	for name, n := range capct {
		all[name] += n
		capctSum += n
	}
	for name, n := range clusterAPI {
		all[capiReconcilePrefix+name] += n
		clusterAPISum += n
	}
	return all, capctSum, clusterAPISum
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
// provisioned divided by the count, flat when time grows linearly. The
// memory columns are CAPCT's process's unless they say CAPI.
func printTable(w io.Writer, all []*result) {
	// The table only repeats scale.json for the eye: an error writing it
	// (stdout closed) is not worth failing a finished run for.
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	_, _ = fmt.Fprintln(tw, "machines\tprovisioned s\tms/machine\tinitialized s\tready s\tRunning s\tCAPCT rec/s\tCAPCT req/machine\tCAPCT writes/machine\tworkload req/machine\tCAPI req/machine\tCAPCT peak heap MiB\tCAPCT base RSS MiB\tCAPCT peak RSS MiB\tCAPI peak RSS MiB\t")
	for _, r := range all {
		capiRSS := "-"
		if r.ClusterAPIProcess != nil {
			capiRSS = fmt.Sprintf("%.0f", r.ClusterAPIProcess.PeakRSSMiB)
		}
		_, _ = fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.0f\t%.0f\t%.0f\t%s\t\n", r.Machines,
			r.Seconds["provisioned"], 1000*r.Seconds["provisioned"]/float64(r.Machines), r.Seconds["initialized"], r.Seconds["ready"],
			r.Seconds["machinesRunning"], r.ReconcilesPerSecond["capct"], r.RequestsPerMachine["capct"], r.RequestsPerMachine["capctWrites"],
			r.RequestsPerMachine["capctWorkload"], r.RequestsPerMachine["clusterAPI"], r.PeakHeapMiB, r.BaselineRSSMiB, r.PeakRSSMiB, capiRSS)
	}
	_ = tw.Flush()
}

// printMemory says what each process's peak resident set holds, for the
// run just finished.
func printMemory(w io.Writer, r *result) {
	_, _ = fmt.Fprintf(w, "peak RSS (VmHWM), %d machines: CAPCT's process %.0f MiB (its reconcilers and webhooks, with the fake engine, "+
		"simulated kubelets, workload proxy and driver: an upper bound of the manager's own)", r.Machines, r.PeakRSSMiB)
	if c := r.ClusterAPIProcess; c != nil {
		_, _ = fmt.Fprintf(w, "; Cluster API's process %.0f MiB (its Cluster and Machine reconcilers, cache and ClusterCache; another pod in a management cluster)", c.PeakRSSMiB)
	}
	_, _ = fmt.Fprintln(w)
}
