// Package main is the scale benchmark of issue #17 (`make bench-scale`):
// it runs CAPCT's ContainerCluster, ContainerMachine and
// ContainerMachinePool reconcilers in this process and Cluster API's
// Cluster and Machine reconcilers in a second one against an envtest API
// server, with the fake container runtime and simulated kubelets, creates
// -machines ContainerMachines across -clusters clusters, and measures the
// time until all are provisioned, Initialized and Ready, the reconciles
// per second, the API requests per machine, and each process's peak heap
// and resident set, keeping CPU and heap profiles (this process's). It is
// a program, not a test, so that `go test ./...` never runs it; it fails
// (exit 1) when envtest's binaries are missing, when Cluster API's process
// dies, or when the machines do not finish within -timeout.
//
// What runs where: in a management cluster Cluster API's reconcilers are
// another pod's (capi-controller-manager), with their own cache and
// ClusterCache, so issue #36's bound on the manager's resident set is
// measured without them. The parent is CAPCT's process: its manager and
// webhooks, and also the fake engine, the simulated kubelets, the workload
// proxy and the driver, which stay with it because they share its
// informers and its fake engine; its figure is therefore an upper bound of
// the manager's own. The child is this binary re-executed with the hidden
// -role capi: Cluster API's manager, reaching the API server with a
// kubeconfig the parent writes and the workload clusters through the
// parent's proxy. It runs until the parent closes its stdin (or sends
// SIGTERM), then hands over its peak resident set, its request counts and
// its reconciles on stdout; its logs share the parent's stderr.
//
// Each run is its own pair of processes, so that the resident set peaks
// (VmHWM) are those of one size only; make bench-scale runs one per size
// and each run merges its result into <out>/scale.json.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"runtime/pprof"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/capct/cluster-api-provider-container/internal/lifecycle"
)

func main() {
	var o options
	flag.IntVar(&o.machines, "machines", 1000, "ContainerMachines to create, spread evenly over the clusters (one control plane each)")
	flag.IntVar(&o.clusters, "clusters", 10, "clusters to spread the machines over")
	flag.DurationVar(&o.timeout, "timeout", 9*time.Minute, "bound of the whole run; the run fails when the machines are not all Ready by then")
	flag.StringVar(&o.out, "out", "out/bench", "directory for scale.json and the profiles")
	flag.BoolVar(&o.stripManagedFields, "strip-managed-fields", true,
		"drop metadata.managedFields from the objects in the manager's cache and CAPCT's ClusterCache, as main.go does; false measures what that saves")
	flag.IntVar(&o.maxConcurrentBootstraps, "max-concurrent-bootstraps", lifecycle.DefaultMaxConcurrentBootstraps,
		"the manager's --max-concurrent-bootstraps (0: no limit)")
	flag.BoolVar(&o.peakHeapProfile, "peak-heap-profile", false,
		"also write <out>/scale-<machines>.peak.heap.pprof, the live heap behind the peak; off by default, as writing it costs memory of its own")
	// Hidden: how the benchmark starts its Cluster API process. -kubeconfig
	// is controller-runtime's flag, registered when its package loads.
	role := flag.String("role", "", "internal: capi runs Cluster API's reconcilers for a parent bench-scale")
	klog.InitFlags(nil)
	flag.Usage = usage
	// A finer heap profile than the default one sample per 512 KiB: the
	// analysis splits a heap of tens of MiB by package.
	goruntime.MemProfileRate = 64 << 10
	flag.Parse()
	// The controllers log to stderr at the manager's default verbosity, as
	// in production: logging is part of what the manager costs. make
	// bench-scale sends it to out/bench/scale-<count>.log.
	ctrl.SetLogger(klog.Background())
	switch *role {
	case "":
	case roleCAPI:
		if err := runClusterAPIProcess(lookupFlag(config.KubeconfigFlagName)); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: Cluster API's process: %v\n", err)
			os.Exit(1)
		}
		return
	default:
		fmt.Fprintf(os.Stderr, "FAIL: unknown -role %q\n", *role)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		os.Exit(1)
	}
}

// hiddenFlags are left out of -help: the parent sets them for its child.
var hiddenFlags = map[string]bool{"role": true, config.KubeconfigFlagName: true}

// usage is flag's default usage without the hidden flags.
func usage() {
	out := flag.CommandLine.Output()
	_, _ = fmt.Fprintf(out, "Usage of %s:\n", os.Args[0])
	visible := flag.NewFlagSet(os.Args[0], flag.ContinueOnError)
	visible.SetOutput(out)
	flag.VisitAll(func(f *flag.Flag) {
		if !hiddenFlags[f.Name] {
			visible.Var(f.Value, f.Name, f.Usage)
		}
	})
	visible.PrintDefaults()
}

// lookupFlag is a flag's value, "" when there is no such flag.
func lookupFlag(name string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// lookupSetFlag is a flag's value when the command line set it, else "".
func lookupSetFlag(name string) string {
	var v string
	flag.Visit(func(f *flag.Flag) {
		if f.Name == name {
			v = f.Value.String()
		}
	})
	return v
}

type options struct {
	machines, clusters int
	timeout            time.Duration
	out                string

	maxConcurrentBootstraps int
	stripManagedFields      bool
	peakHeapProfile         bool
}

func run(o options) error {
	if o.clusters < 1 || o.machines < o.clusters {
		return fmt.Errorf("need at least one machine per cluster: -machines %d -clusters %d", o.machines, o.clusters)
	}
	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return fmt.Errorf("failed to create %s: %w", o.out, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()

	base := filepath.Join(o.out, fmt.Sprintf("scale-%d", o.machines))
	var mem memorySampler
	if o.peakHeapProfile {
		mem.peakProfile = base + ".peak.heap.pprof"
	}
	go mem.run(ctx, 200*time.Millisecond)

	b, err := newBench(ctx, o)
	if err != nil {
		return err
	}
	defer b.stop()

	cpu, err := os.Create(base + ".cpu.pprof")
	if err != nil {
		return fmt.Errorf("failed to create the CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		_ = cpu.Close()
		return fmt.Errorf("failed to start the CPU profile: %w", err)
	}
	res, runErr := b.measure(ctx)
	pprof.StopCPUProfile()
	if err := cpu.Close(); err != nil {
		return errors.Join(runErr, fmt.Errorf("failed to write the CPU profile: %w", err))
	}
	mem.sample()
	if err := mem.err(); err != nil {
		return errors.Join(runErr, err)
	}
	if err := writeHeapProfile(base + ".heap.pprof"); err != nil {
		return errors.Join(runErr, err)
	}
	res.LoadAverage[1] = loadAverage()
	// This process's: CAPCT's. Cluster API's process's are in
	// res.ClusterAPIProcess, from its report.
	res.PeakHeapMiB = toMiB(mem.peakHeap)
	res.PeakHeapInuseMiB = toMiB(mem.peakHeapInUs)
	res.PeakGoSysMiB = toMiB(mem.peakSys)
	res.PeakRSSMiB = toMiB(procStatus("VmHWM"))
	res.RSSAtEndMiB = toMiB(procStatus("VmRSS"))
	res.Profiles = []string{base + ".cpu.pprof", base + ".heap.pprof"}
	if mem.peakProfile != "" {
		res.Profiles = append(res.Profiles, mem.peakProfile)
	}
	if runErr != nil {
		res.Error = runErr.Error()
	}
	all, err := merge(filepath.Join(o.out, "scale.json"), res)
	if err != nil {
		return errors.Join(runErr, err)
	}
	printTable(os.Stdout, all)
	printMemory(os.Stdout, res)
	return runErr
}

// writeHeapProfile writes the live heap after a collection, so that it
// shows what the manager holds with all machines Ready, not garbage.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("failed to create the heap profile: %w", err)
	}
	goruntime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("failed to write the heap profile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("failed to write the heap profile: %w", err)
	}
	return nil
}

// managerConfig makes a REST config look like a manager's: its rate
// limits, its user agent, and the request counter around its transport.
func managerConfig(cfg *rest.Config, agent string, qps float32, burst int, c *requestCounter) {
	cfg.QPS, cfg.Burst, cfg.UserAgent = qps, burst, agent
	cfg.Wrap(c.wrap)
}
