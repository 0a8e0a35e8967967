//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/test/framework"
	"sigs.k8s.io/cluster-api/util/labels/format"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	expinfrav1 "github.com/capct/cluster-api-provider-container/exp/api/v1alpha1"
)

// What the upgrade specs watch while the version changes (issue #35): a
// workload that must keep answering, and the MachinePool's rolling update,
// which must stay within its maxSurge and maxUnavailable. Both start in the
// spec's PreWaitForControlPlaneToBeUpgraded hook, right after the topology's
// version changed, and stop in a JustAfterEach, after the spec has waited
// for the whole upgrade and before its AfterEach deletes the cluster.
//
// The workload is CoreDNS, because it runs in every cluster and nothing may
// be pulled here; its Deployment rolls too during the upgrade (its tag
// changes), and its pods are evicted from each worker that is replaced.
// Two probes ask its metrics endpoint (:9153/metrics) once a second:
//   - api-proxy: through the workload API server's service proxy, as a
//     kubectl user would. A failed poll is told apart: "api-unreachable"
//     when the API server's /readyz does not answer either, else
//     "service-not-answering" (the API server is up, kube-dns is not).
//   - nodeport: through a NodePort Service of the probe's own beside
//     kube-dns (same pods), from this host to the node containers'
//     addresses, as a client behind a load balancer over every node would:
//     kube-proxy, the pod network and CoreDNS, without the API server. A
//     poll answers when any node answers.
//
// A gap is reported, not failed: CoreDNS is one Deployment of 2 replicas
// without a PodDisruptionBudget (kubeadm makes none), so when the workers
// holding both pods are drained at about the same time (the
// MachineDeployment and the MachinePool roll in parallel) Kubernetes itself
// allows an outage; the issue asks to measure it. The probe fails the spec
// only when it never answered before the upgrade (then it measures
// nothing) or does not answer again after it (then the cluster did not
// come back).
const (
	probeInterval = time.Second
	// probeTimeout bounds one request of a poll, so that a poll of a dead
	// endpoint ends well before the next few.
	probeTimeout = 3 * time.Second
	// probeBefore is how long the probes get at the hook to answer for the
	// first time; the NodePort needs kube-proxy to program the new Service.
	probeBefore = time.Minute
	// probeAfter is how long the probes get to answer again once the spec
	// has seen the upgrade finished.
	probeAfter = 2 * time.Minute

	poolSampleInterval = time.Second

	// probeServiceName is the NodePort Service the nodeport probe creates
	// in the workload cluster's kube-system, selecting kube-dns's pods.
	probeServiceName = "capct-upgrade-probe"
	coreDNSSelector  = "kube-dns" // the k8s-app label of kubeadm's CoreDNS pods
	coreDNSMetrics   = 9153

	// poolVersionAnnotation is the MachinePool version the pool created a
	// ContainerMachine for (VersionAnnotation in
	// exp/internal/controllers/containermachinepool, which this module
	// cannot import).
	poolVersionAnnotation = "containermachinepool.infrastructure.cluster.x-k8s.io/version"
)

// coreDNSMetricsMark is in every answer of CoreDNS's metrics endpoint, so
// that an answer of something else is not taken for CoreDNS's.
var coreDNSMetricsMark = []byte("coredns_")

// upgradeWatch is one upgrade Describe's probes and pool samplers. Its
// hook starts a run; JustAfterEach ends it.
type upgradeWatch struct {
	run *watchRun
}

// watchUpgrade registers the JustAfterEach that ends the watch; call it in
// the Describe's body beside ClusterUpgradeConformanceSpec, and give the
// watch to upgradeInput, whose hook starts it.
func watchUpgrade() *upgradeWatch {
	w := &upgradeWatch{}
	JustAfterEach(func() { w.finish() })
	return w
}

// watchRun is what one spec's hook started.
type watchRun struct {
	namespace, clusterName, version string
	started                         time.Time
	cancel                          context.CancelFunc
	wg                              sync.WaitGroup
	probes                          []*probe
	pools                           []*poolSampler
	management                      client.Client
}

// start is the spec's PreWaitForControlPlaneToBeUpgraded: the topology has
// just been moved to version.
func (w *upgradeWatch) start(mgmt framework.ClusterProxy, namespace, clusterName, version string) {
	runCtx, cancel := context.WithCancel(ctx)
	r := &watchRun{
		namespace: namespace, clusterName: clusterName, version: version,
		started: time.Now(), cancel: cancel, management: mgmt.GetClient(),
	}
	w.run = r // JustAfterEach stops what started even when an Expect below fails

	workload := mgmt.GetWorkloadCluster(ctx, namespace, clusterName)
	probeConfig, err := freshConnections(workload.GetRESTConfig(), probeTimeout)
	Expect(err).ToNot(HaveOccurred(), "failed to build the probe's client of the workload cluster")
	probeClient, err := kubernetes.NewForConfig(probeConfig)
	Expect(err).ToNot(HaveOccurred(), "failed to build the probe's client of the workload cluster")
	nodePort := createProbeService(workload.GetClientSet())

	r.probes = []*probe{
		{name: "api-proxy", check: apiProxyCheck(probeClient)},
		{name: "nodeport", check: nodePortCheck(r.management, namespace, clusterName, nodePort)},
	}

	pools := &clusterv1.MachinePoolList{}
	Expect(r.management.List(ctx, pools, client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: clusterName})).
		To(Succeed(), "failed to list the MachinePools of Cluster %s", clusterName)
	Expect(pools.Items).ToNot(BeEmpty(), "the upgrade flavor has a MachinePool: the pool check would pass on nothing")
	for _, mp := range pools.Items {
		s := &poolSampler{client: r.management, namespace: namespace, clusterName: clusterName, name: mp.Name}
		first, err := s.sample(runCtx)
		Expect(err).ToNot(HaveOccurred(), "failed to sample MachinePool %s at the hook", mp.Name)
		s.initial = first.activeNames()
		s.record(first)
		r.pools = append(r.pools, s)
	}

	for _, p := range r.probes {
		r.wg.Go(func() { defer GinkgoRecover(); p.run(runCtx) })
	}
	for _, s := range r.pools {
		r.wg.Go(func() { defer GinkgoRecover(); s.run(runCtx) })
	}

	// "Before": each probe must answer once, so that a gap measures the
	// workload, not a probe that never worked.
	for _, p := range r.probes {
		Eventually(p.hasAnswered).WithTimeout(probeBefore).WithPolling(probeInterval).Should(BeTrue(), func() string {
			return fmt.Sprintf("probe %s never answered at the start of the upgrade: %s", p.name, p.lastError())
		})
	}
}

// finish is the JustAfterEach: the spec has waited for every machine and
// Node to be upgraded, or has failed.
func (w *upgradeWatch) finish() {
	r := w.run
	w.run = nil
	if r == nil {
		return // the spec failed before its hook
	}
	specFailed := CurrentSpecReport().Failed()
	upgraded := time.Now()
	var problems []string
	if !specFailed {
		// "After": each probe answers again within probeAfter. After a
		// failed spec the cluster may be half way, so only report.
		for _, p := range r.probes {
			deadline := upgraded.Add(probeAfter)
			for !p.answeredSince(upgraded) && time.Now().Before(deadline) {
				time.Sleep(probeInterval)
			}
			if !p.answeredSince(upgraded) {
				problems = append(problems, fmt.Sprintf("probe %s did not answer within %s after the upgrade: %s", p.name, probeAfter, p.lastError()))
			}
		}
	}
	r.cancel()
	r.wg.Wait()

	folder := filepath.Join(artifactFolder, "clusters", r.clusterName)
	Expect(os.MkdirAll(folder, 0o750)).To(Succeed())
	var probeReport strings.Builder
	fmt.Fprintf(&probeReport, "upgrade to %s: probes from the hook %s to %s (upgrade seen finished at +%s)\n\n",
		r.version, r.started.Format(time.RFC3339), time.Now().Format(time.RFC3339), upgraded.Sub(r.started).Round(time.Second))
	for _, p := range r.probes {
		s := summarize(p.results())
		line := s.String()
		AddReportEntry("upgrade probe "+p.name, line)
		fmt.Fprintf(&probeReport, "%s: %s\n", p.name, line)
		probeReport.WriteString(s.details(r.started))
		probeReport.WriteString("\n")
	}
	Expect(os.WriteFile(filepath.Join(folder, "upgrade-probes.txt"), []byte(probeReport.String()), 0o600)).To(Succeed())

	var poolReport strings.Builder
	for _, s := range r.pools {
		// Whether the pool rolled is checked after a failed spec too, but
		// only reported then: the spec may have stopped half way.
		rolled := "rolled"
		final, err := s.sample(ctx)
		if err == nil {
			s.record(final)
			err = checkRolled(s.initial, final, r.version)
		}
		if err != nil {
			rolled = "not rolled: " + err.Error()
			if !specFailed {
				problems = append(problems, fmt.Sprintf("MachinePool %s: %v", s.name, err))
			}
		}
		line := s.summary() + "; " + rolled
		AddReportEntry("machinepool rollout "+s.name, line)
		fmt.Fprintf(&poolReport, "MachinePool %s: %s\n", s.name, line)
		poolReport.WriteString(s.details(r.started))
		poolReport.WriteString("\n")
		if v := s.firstViolation(); v != "" {
			problems = append(problems, fmt.Sprintf("MachinePool %s left its rolling-update bounds: %s", s.name, v))
		}
	}
	Expect(os.WriteFile(filepath.Join(folder, "machinepool-rollout.txt"), []byte(poolReport.String()), 0o600)).To(Succeed())

	Expect(problems).To(BeEmpty(), "the upgrade's probes and MachinePool checks (%s)", folder)
}

// freshConnections returns a copy of cfg whose every request opens its own
// connection, bounded by timeout. The API server the probe reaches through
// the load balancer is replaced during the upgrade: a kept-alive
// connection to the old one would hang until client-go's HTTP/2 health
// check gives up (tens of seconds), a gap of the probe's, not the
// cluster's.
func freshConnections(cfg *rest.Config, timeout time.Duration) (*rest.Config, error) {
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to get the TLS configuration of %s: %w", cfg.Host, err)
	}
	c := rest.CopyConfig(cfg)
	// A custom transport carries the TLS settings itself.
	c.TLSClientConfig = rest.TLSClientConfig{}
	c.Transport = &http.Transport{
		TLSClientConfig:     tlsConfig,
		DisableKeepAlives:   true,
		DialContext:         (&net.Dialer{Timeout: timeout}).DialContext,
		TLSHandshakeTimeout: timeout,
	}
	c.Timeout = timeout
	c.QPS, c.Burst = 50, 100
	return c, nil
}

// createProbeService creates the nodeport probe's Service and returns its
// node port.
func createProbeService(cs kubernetes.Interface) int32 {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: probeServiceName, Namespace: metav1.NamespaceSystem},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"k8s-app": coreDNSSelector},
			Ports: []corev1.ServicePort{{
				Name: "metrics", Protocol: corev1.ProtocolTCP,
				Port: coreDNSMetrics, TargetPort: intstr.FromInt32(coreDNSMetrics),
			}},
		},
	}
	var created *corev1.Service
	Eventually(func() (err error) {
		created, err = cs.CoreV1().Services(metav1.NamespaceSystem).Create(ctx, svc, metav1.CreateOptions{})
		return err
	}).WithTimeout(probeBefore).WithPolling(5*time.Second).Should(Succeed(), "failed to create the probe Service %s", probeServiceName)
	Expect(created.Spec.Ports).To(HaveLen(1))
	return created.Spec.Ports[0].NodePort
}

// failureClass says which part did not answer; "" is an answer.
type failureClass string

const (
	answered            failureClass = ""
	apiUnreachable      failureClass = "api-unreachable"
	serviceNotAnswering failureClass = "service-not-answering"
	noNodeAnswered      failureClass = "no-node-answered"
)

// apiProxyCheck asks kube-dns's metrics through the API server.
func apiProxyCheck(cs kubernetes.Interface) func(context.Context) (failureClass, error) {
	return func(ctx context.Context) (failureClass, error) {
		body, err := cs.CoreV1().Services(metav1.NamespaceSystem).ProxyGet("http", "kube-dns", fmt.Sprint(coreDNSMetrics), "/metrics", nil).DoRaw(ctx)
		if err == nil {
			if bytes.Contains(body, coreDNSMetricsMark) {
				return answered, nil
			}
			err = fmt.Errorf("kube-dns answered without CoreDNS's metrics: %.80q", body)
		}
		// Which one did not answer: the API server, or the Service behind it?
		if _, readyErr := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx); readyErr != nil {
			return apiUnreachable, fmt.Errorf("%w; /readyz: %w", err, readyErr)
		}
		return serviceNotAnswering, err
	}
}

// nodePortCheck asks the probe Service's node port on every address of the
// cluster's Machines (as the management cluster lists them, so that a
// workload API server that is down does not matter) and answers when any
// node does.
func nodePortCheck(mgmt client.Client, namespace, clusterName string, nodePort int32) func(context.Context) (failureClass, error) {
	httpClient := &http.Client{Timeout: probeTimeout, Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}}
	var known []string // the last addresses listed, when a list fails
	return func(ctx context.Context) (failureClass, error) {
		machines := &clusterv1.MachineList{}
		if err := mgmt.List(ctx, machines, client.InNamespace(namespace), client.MatchingLabels{clusterv1.ClusterNameLabel: clusterName}); err == nil {
			known = machineAddresses(machines.Items)
		}
		if len(known) == 0 {
			return noNodeAnswered, fmt.Errorf("no Machine of Cluster %s has an address", clusterName)
		}
		errs := make(chan error, len(known))
		for _, addr := range known {
			go func() {
				url := fmt.Sprintf("http://%s/metrics", net.JoinHostPort(addr, fmt.Sprint(nodePort)))
				errs <- getCoreDNSMetrics(ctx, httpClient, url)
			}()
		}
		var failures []string
		for range known {
			err := <-errs
			if err == nil {
				return answered, nil // the others end by their timeout
			}
			failures = append(failures, err.Error())
		}
		slices.Sort(failures)
		return noNodeAnswered, fmt.Errorf("no node answered: %s", strings.Join(failures, "; "))
	}
}

func getCoreDNSMetrics(ctx context.Context, c *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("failed to build the request for %s: %w", url, err)
	}
	resp, err := c.Do(req)
	if err != nil {
		return err // already names the URL
	}
	defer func() { _ = resp.Body.Close() }()
	// The families come sorted, coredns_ before go_ and process_.
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, coreDNSMetricsMark) {
		return fmt.Errorf("%s answered %s without CoreDNS's metrics", url, resp.Status)
	}
	return nil
}

// machineAddresses are the InternalIPs of machines, sorted.
func machineAddresses(machines []clusterv1.Machine) []string {
	var out []string
	for _, m := range machines {
		for _, a := range m.Status.Addresses {
			if a.Type == clusterv1.MachineInternalIP && a.Address != "" {
				out = append(out, a.Address)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// probe polls one check every probeInterval until its context ends.
type probe struct {
	name  string
	check func(context.Context) (failureClass, error)

	mu    sync.Mutex
	polls []pollResult
}

// pollResult is one poll: when it started, how long it took and what failed.
type pollResult struct {
	At      time.Time
	Took    time.Duration
	Failure failureClass
	Err     string
}

func (p *probe) run(ctx context.Context) {
	ticker := time.NewTicker(probeInterval)
	defer ticker.Stop()
	for {
		start := time.Now()
		class, err := p.check(ctx)
		if ctx.Err() != nil {
			return // stopped during the poll: its failure is the stop's
		}
		r := pollResult{At: start, Took: time.Since(start), Failure: class}
		if err != nil {
			r.Err = err.Error()
		}
		p.mu.Lock()
		p.polls = append(p.polls, r)
		p.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (p *probe) results() []pollResult {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.polls)
}

func (p *probe) hasAnswered() bool { return p.answeredSince(time.Time{}) }

// answeredSince is true when a poll started at or after t answered.
func (p *probe) answeredSince(t time.Time) bool {
	for _, r := range p.results() {
		if r.Failure == answered && !r.At.Before(t) {
			return true
		}
	}
	return false
}

func (p *probe) lastError() string {
	polls := p.results()
	for i := len(polls) - 1; i >= 0; i-- {
		if polls[i].Failure != answered {
			return fmt.Sprintf("%s: %s", polls[i].Failure, polls[i].Err)
		}
	}
	return "no failed poll"
}

// gap is a run of failed polls: from the first failed poll's start to the
// start of the poll that ended it. A run that no poll ended (the watch
// stopped first) is Open and ends at its last poll's end.
type gap struct {
	From, To time.Time
	Polls    int
	Open     bool
}

func (g gap) Duration() time.Duration { return g.To.Sub(g.From) }

// probeSummary is what a probe saw after its first answer; polls before it
// (the NodePort being programmed) are counted apart.
type probeSummary struct {
	Polls, Failed     int
	BeforeFirstAnswer int
	ByClass           map[failureClass]int
	// Gaps are every run of failed polls, in order; Longest the longest of
	// them, LongestByClass the longest run failing with one class.
	Gaps           []gap
	Longest        gap
	LongestByClass map[failureClass]gap
	polls          []pollResult
}

// summarize measures the gaps of polls, which are in order.
func summarize(polls []pollResult) probeSummary {
	s := probeSummary{ByClass: map[failureClass]int{}, LongestByClass: map[failureClass]gap{}}
	first := slices.IndexFunc(polls, func(r pollResult) bool { return r.Failure == answered })
	if first < 0 {
		s.BeforeFirstAnswer = len(polls)
		return s
	}
	s.BeforeFirstAnswer = first
	polls = polls[first:]
	s.polls = polls
	s.Polls = len(polls)
	runEnd := func(i int) (time.Time, bool) {
		if i < len(polls) {
			return polls[i].At, false
		}
		last := polls[len(polls)-1]
		return last.At.Add(last.Took), true
	}
	for i := 0; i < len(polls); {
		if polls[i].Failure == answered {
			i++
			continue
		}
		j := i
		for j < len(polls) && polls[j].Failure != answered {
			s.Failed++
			s.ByClass[polls[j].Failure]++
			j++
		}
		g := gap{From: polls[i].At, Polls: j - i}
		g.To, g.Open = runEnd(j)
		s.Gaps = append(s.Gaps, g)
		if g.Duration() > s.Longest.Duration() {
			s.Longest = g
		}
		// Runs of one class inside this run.
		for k := i; k < j; {
			l := k
			for l < j && polls[l].Failure == polls[k].Failure {
				l++
			}
			cg := gap{From: polls[k].At, Polls: l - k}
			cg.To, cg.Open = runEnd(l)
			if cg.Duration() > s.LongestByClass[polls[k].Failure].Duration() {
				s.LongestByClass[polls[k].Failure] = cg
			}
			k = l
		}
		i = j
	}
	return s
}

func (s probeSummary) String() string {
	if s.Polls == 0 {
		return fmt.Sprintf("never answered (%d failed polls)", s.BeforeFirstAnswer)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d polls, %d failed, longest gap %s (%d polls)", s.Polls, s.Failed, s.Longest.Duration().Round(time.Millisecond), s.Longest.Polls)
	for _, c := range []failureClass{apiUnreachable, serviceNotAnswering, noNodeAnswered} {
		if n := s.ByClass[c]; n > 0 {
			fmt.Fprintf(&b, "; %s: %d polls, longest %s", c, n, s.LongestByClass[c].Duration().Round(time.Millisecond))
		}
	}
	if s.BeforeFirstAnswer > 0 {
		fmt.Fprintf(&b, "; %d failed before the first answer", s.BeforeFirstAnswer)
	}
	return b.String()
}

// details lists the gaps and the failed polls, timed from start.
func (s probeSummary) details(start time.Time) string {
	var b strings.Builder
	for _, g := range s.Gaps {
		open := ""
		if g.Open {
			open = " (still open when the watch stopped)"
		}
		fmt.Fprintf(&b, "  gap +%s .. +%s: %s, %d polls%s\n", rel(g.From, start), rel(g.To, start), g.Duration().Round(time.Millisecond), g.Polls, open)
	}
	for _, r := range s.polls {
		if r.Failure != answered {
			fmt.Fprintf(&b, "  failed +%s (%s): %s: %s\n", rel(r.At, start), r.Took.Round(time.Millisecond), r.Failure, r.Err)
		}
	}
	return b.String()
}

func rel(t, start time.Time) time.Duration { return t.Sub(start).Round(100 * time.Millisecond) }

// poolBounds are a MachinePool's replicas and its ContainerMachinePool's
// resolved rolling-update bounds.
type poolBounds struct {
	Replicas, MaxSurge, MaxUnavailable int
}

// resolvePoolBounds resolves a RollingUpdate as the ContainerMachinePool
// controller does (resolveStrategy in
// exp/internal/controllers/containermachinepool/plan.go, which this module
// cannot import; docs/machinepool.md): maxSurge defaults to 1 and rounds
// up, maxUnavailable defaults to 0 and rounds down, and both zero make
// maxSurge 1.
func resolvePoolBounds(s expinfrav1.RollingUpdate, replicas int) poolBounds {
	resolve := func(v *intstr.IntOrString, def int, roundUp bool) int {
		if v == nil {
			return def
		}
		n, err := intstr.GetScaledValueFromIntOrPercent(v, replicas, roundUp)
		if err != nil || n < 0 {
			return def
		}
		return n
	}
	b := poolBounds{
		Replicas:       replicas,
		MaxSurge:       resolve(s.MaxSurge, 1, true),
		MaxUnavailable: resolve(s.MaxUnavailable, 0, false),
	}
	if b.MaxSurge == 0 && b.MaxUnavailable == 0 {
		b.MaxSurge = 1
	}
	return b
}

// poolMember is one machine of a pool in a sample.
type poolMember struct {
	Name, Version string
	// Deleting: its ContainerMachine or Machine is being deleted, in the
	// later of the sample's two Machine lists; DeletingBefore in the
	// earlier one.
	Deleting, DeletingBefore bool
	// Provisioned is the ContainerMachine's status.initialization.provisioned.
	Provisioned bool
	// NodeReady is its Machine's NodeReady condition, in the earlier list.
	NodeReady bool
	// Orphan: a Machine of the pool without its ContainerMachine.
	Orphan bool
}

// poolSample is a pool at one moment.
type poolSample struct {
	At     time.Time
	Bounds poolBounds
	// Active counts the members not being deleted; Available those not
	// being deleted and provisioned; NodeReady those not being deleted
	// whose Node is Ready.
	Active, Available, NodeReady int
	Members                      []poolMember
}

// buildPoolSample makes a sample from three lists read one after the
// other: Machines (before), ContainerMachines, Machines (after). The lists
// are not one snapshot, so each bound is checked on the view that cannot
// break it by the lists' order alone: Active (maxSurge) takes deletions
// from the later Machine list, so a member deleted between the lists is
// not counted; Available and NodeReady (maxUnavailable) take them from the
// earlier list, so a replacement's provisioning seen in the
// ContainerMachine list is never paired with a deletion that happened
// after it. A machine the pool created after its ContainerMachine list is
// not counted at all. The members are the ContainerMachines and the
// Machines of the pool that lost theirs.
func buildPoolSample(at time.Time, b poolBounds, before []clusterv1.Machine, cms []infrav1.ContainerMachine, after []clusterv1.Machine) poolSample {
	index := func(ms []clusterv1.Machine) map[string]*clusterv1.Machine {
		out := make(map[string]*clusterv1.Machine, len(ms))
		for i := range ms {
			out[ms[i].Name] = &ms[i]
		}
		return out
	}
	beforeByName, afterByName := index(before), index(after)
	s := poolSample{At: at, Bounds: b}
	for i := range cms {
		cm := &cms[i]
		name := ownerMachineName(cm)
		mBefore, mAfter := beforeByName[name], afterByName[name]
		cmDeleting := !cm.DeletionTimestamp.IsZero()
		m := poolMember{
			Name:           cm.Name,
			Version:        cm.Annotations[poolVersionAnnotation],
			Deleting:       cmDeleting || (mAfter != nil && !mAfter.DeletionTimestamp.IsZero()),
			DeletingBefore: cmDeleting || (mBefore != nil && !mBefore.DeletionTimestamp.IsZero()),
			Provisioned:    ptr.Deref(cm.Status.Initialization.Provisioned, false),
			NodeReady:      mBefore != nil && meta.IsStatusConditionTrue(mBefore.Status.Conditions, clusterv1.MachineNodeReadyCondition),
		}
		if !m.Deleting {
			s.Active++
		}
		if !m.DeletingBefore && m.Provisioned {
			s.Available++
		}
		if !m.DeletingBefore && m.NodeReady {
			s.NodeReady++
		}
		s.Members = append(s.Members, m)
	}
	// A Machine of the pool whose ContainerMachine is gone while the
	// Machine is not being deleted is still a member: Cluster API counts
	// it, and nothing will run it. Only Machines of the earlier list: their
	// ContainerMachine existed before the ContainerMachine list, so its
	// absence there is not the lists' order.
	withCM := make(map[string]bool, len(cms))
	for i := range cms {
		withCM[cms[i].Name] = true
	}
	for i := range before {
		mb := &before[i]
		if withCM[mb.Spec.InfrastructureRef.Name] {
			continue
		}
		mAfter := afterByName[mb.Name]
		m := poolMember{
			Name: mb.Name, Version: mb.Spec.Version, Orphan: true,
			Deleting:       mAfter == nil || !mAfter.DeletionTimestamp.IsZero(),
			DeletingBefore: !mb.DeletionTimestamp.IsZero(),
			NodeReady:      meta.IsStatusConditionTrue(mb.Status.Conditions, clusterv1.MachineNodeReadyCondition),
		}
		if !m.Deleting {
			s.Active++
		}
		if !m.DeletingBefore && m.NodeReady {
			s.NodeReady++
		}
		s.Members = append(s.Members, m)
	}
	slices.SortFunc(s.Members, func(a, b poolMember) int { return strings.Compare(a.Name, b.Name) })
	return s
}

// ownerMachineName is the Machine that controls cm; Cluster API names a
// MachinePool's Machine after its infrastructure machine, so the name is
// the fallback before it took control.
func ownerMachineName(cm *infrav1.ContainerMachine) string {
	for _, ref := range cm.OwnerReferences {
		if ref.Kind == "Machine" && ptr.Deref(ref.Controller, false) {
			return ref.Name
		}
	}
	return cm.Name
}

// checkPoolSample checks a sample against its bounds. Availability counts
// only once the pool has had its replicas available (reached): a pool
// still coming up is not a rollout.
//
// Available means provisioned (the container runs and its bootstrap ran),
// the readiness the ContainerMachinePool's rollout waits for before it
// deletes an outdated machine (docs/machinepool.md), so this checks the
// bound the controller promises. Node Ready comes later (registration,
// pod network); its minimum is reported beside, not checked.
func checkPoolSample(s poolSample, reached bool) error {
	b := s.Bounds
	if maxActive := b.Replicas + b.MaxSurge; s.Active > maxActive {
		return fmt.Errorf("%d members not being deleted, more than replicas %d + maxSurge %d", s.Active, b.Replicas, b.MaxSurge)
	}
	if minAvailable := b.Replicas - b.MaxUnavailable; reached && s.Available < minAvailable {
		return fmt.Errorf("%d members provisioned and not being deleted, fewer than replicas %d - maxUnavailable %d", s.Available, b.Replicas, b.MaxUnavailable)
	}
	return nil
}

// checkRolled is true when the rollout replaced every member the pool had
// at the hook: the pool has its replicas, all provisioned, none of them an
// initial one, all of version. Without it the bounds could hold because
// nothing rolled.
func checkRolled(initial []string, final poolSample, version string) error {
	var active []poolMember
	for _, m := range final.Members {
		if !m.Deleting {
			active = append(active, m)
		}
	}
	if len(active) != final.Bounds.Replicas {
		return fmt.Errorf("%d members after the upgrade, want %d: %s", len(active), final.Bounds.Replicas, final.membersString())
	}
	for _, m := range active {
		switch {
		case slices.Contains(initial, m.Name):
			return fmt.Errorf("member %s was there before the upgrade: the pool did not roll: %s", m.Name, final.membersString())
		case m.Version != version:
			return fmt.Errorf("member %s is of version %q, want %s: %s", m.Name, m.Version, version, final.membersString())
		case !m.Provisioned:
			return fmt.Errorf("member %s is not provisioned after the upgrade: %s", m.Name, final.membersString())
		}
	}
	return nil
}

// activeNames are the members not being deleted.
func (s poolSample) activeNames() []string {
	var out []string
	for _, m := range s.Members {
		if !m.Deleting {
			out = append(out, m.Name)
		}
	}
	return out
}

func (s poolSample) membersString() string {
	parts := make([]string, 0, len(s.Members))
	for _, m := range s.Members {
		state := []string{m.Version}
		if m.Provisioned {
			state = append(state, "provisioned")
		}
		if m.NodeReady {
			state = append(state, "node-ready")
		}
		if m.Deleting {
			state = append(state, "deleting")
		}
		if m.Orphan {
			state = append(state, "machine-without-containermachine")
		}
		parts = append(parts, fmt.Sprintf("%s[%s]", m.Name, strings.Join(state, ",")))
	}
	return strings.Join(parts, " ")
}

func (s poolSample) String() string {
	return fmt.Sprintf("active %d available %d node-ready %d (replicas %d, maxSurge %d, maxUnavailable %d): %s",
		s.Active, s.Available, s.NodeReady, s.Bounds.Replicas, s.Bounds.MaxSurge, s.Bounds.MaxUnavailable, s.membersString())
}

// poolSampler samples one MachinePool every poolSampleInterval.
type poolSampler struct {
	client                 client.Client
	namespace, clusterName string
	name                   string // the MachinePool's
	initial                []string

	mu         sync.Mutex
	samples    int
	errors     int
	lastError  string
	reached    bool
	changes    []poolSample // the samples whose members or counts differ from the one before
	violations []string
	maxActive  int
	minAvail   int // after reached; -1 until then
	minReady   int // after reached; -1 until then
}

// sample reads the pool once; see buildPoolSample for the lists' order.
func (s *poolSampler) sample(ctx context.Context) (poolSample, error) {
	mp := &clusterv1.MachinePool{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: s.name}, mp); err != nil {
		return poolSample{}, fmt.Errorf("failed to get MachinePool %s: %w", s.name, err)
	}
	cmp := &expinfrav1.ContainerMachinePool{}
	if err := s.client.Get(ctx, client.ObjectKey{Namespace: s.namespace, Name: mp.Spec.Template.Spec.InfrastructureRef.Name}, cmp); err != nil {
		return poolSample{}, fmt.Errorf("failed to get the ContainerMachinePool of MachinePool %s: %w", s.name, err)
	}
	bounds := resolvePoolBounds(cmp.Spec.Strategy, int(ptr.Deref(mp.Spec.Replicas, 1)))
	selector := client.MatchingLabels{
		clusterv1.ClusterNameLabel:     s.clusterName,
		clusterv1.MachinePoolNameLabel: format.MustFormatValue(s.name),
	}
	at := time.Now()
	before := &clusterv1.MachineList{}
	if err := s.client.List(ctx, before, client.InNamespace(s.namespace), selector); err != nil {
		return poolSample{}, fmt.Errorf("failed to list the Machines of MachinePool %s: %w", s.name, err)
	}
	cms := &infrav1.ContainerMachineList{}
	if err := s.client.List(ctx, cms, client.InNamespace(s.namespace), selector); err != nil {
		return poolSample{}, fmt.Errorf("failed to list the ContainerMachines of MachinePool %s: %w", s.name, err)
	}
	after := &clusterv1.MachineList{}
	if err := s.client.List(ctx, after, client.InNamespace(s.namespace), selector); err != nil {
		return poolSample{}, fmt.Errorf("failed to list the Machines of MachinePool %s: %w", s.name, err)
	}
	return buildPoolSample(at, bounds, before.Items, cms.Items, after.Items), nil
}

func (s *poolSampler) run(ctx context.Context) {
	ticker := time.NewTicker(poolSampleInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		sample, err := s.sample(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			s.mu.Lock()
			s.errors++
			s.lastError = err.Error()
			s.mu.Unlock()
			continue
		}
		s.record(sample)
	}
}

// record checks a sample and keeps it when it differs from the last kept.
func (s *poolSampler) record(sample poolSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.samples == 0 {
		s.minAvail, s.minReady = -1, -1
	}
	s.samples++
	if !s.reached && sample.Available >= sample.Bounds.Replicas {
		s.reached = true
	}
	s.maxActive = max(s.maxActive, sample.Active)
	if s.reached {
		if s.minAvail < 0 || sample.Available < s.minAvail {
			s.minAvail = sample.Available
		}
		if s.minReady < 0 || sample.NodeReady < s.minReady {
			s.minReady = sample.NodeReady
		}
	}
	if err := checkPoolSample(sample, s.reached); err != nil {
		s.violations = append(s.violations, fmt.Sprintf("%s at %s: %s", err, sample.At.Format(time.RFC3339Nano), sample))
	}
	if n := len(s.changes); n == 0 || s.changes[n-1].String() != sample.String() {
		s.changes = append(s.changes, sample)
	}
}

func (s *poolSampler) firstViolation() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.violations) == 0 {
		return ""
	}
	return fmt.Sprintf("%d violating samples, the first: %s", len(s.violations), s.violations[0])
}

func (s *poolSampler) summary() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b poolBounds
	if n := len(s.changes); n > 0 {
		b = s.changes[n-1].Bounds
	}
	last := ""
	if n := len(s.changes); n > 0 {
		last = strings.Join(s.changes[n-1].activeNames(), " ")
	}
	return fmt.Sprintf("replicas %d, maxSurge %d, maxUnavailable %d; %d samples (%d failed reads); max members not being deleted %d (bound %d); min provisioned %d (bound %d); min NodeReady %d; %d violations; members at the hook [%s], at the end [%s]",
		b.Replicas, b.MaxSurge, b.MaxUnavailable, s.samples, s.errors,
		s.maxActive, b.Replicas+b.MaxSurge, s.minAvail, b.Replicas-b.MaxUnavailable, s.minReady,
		len(s.violations), strings.Join(s.initial, " "), last)
}

// details lists the samples where the pool changed, timed from start.
func (s *poolSampler) details(start time.Time) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, c := range s.changes {
		fmt.Fprintf(&b, "  +%s %s\n", rel(c.At, start), c)
	}
	for _, v := range s.violations {
		fmt.Fprintf(&b, "  violation: %s\n", v)
	}
	if s.lastError != "" {
		fmt.Fprintf(&b, "  last failed read: %s\n", s.lastError)
	}
	return b.String()
}

// The pure parts above, as plain Go tests: go test -tags e2e -run 'TestSummarize|TestPool|TestCheckRolled' .

func TestSummarizeGaps(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	poll := func(s int, c failureClass) pollResult {
		return pollResult{At: at(s), Took: 100 * time.Millisecond, Failure: c}
	}
	ok := answered
	tests := []struct {
		name             string
		polls            []pollResult
		wantPolls        int
		wantFailed       int
		wantBefore       int
		wantLongest      time.Duration
		wantLongestPolls int
		wantOpen         bool
		wantByClass      map[failureClass]time.Duration
	}{
		{name: "never answered", polls: []pollResult{poll(0, noNodeAnswered), poll(1, noNodeAnswered)}, wantBefore: 2},
		{name: "no gap", polls: []pollResult{poll(0, ok), poll(1, ok), poll(2, ok)}, wantPolls: 3},
		{
			name:      "failures before the first answer are not a gap",
			polls:     []pollResult{poll(0, noNodeAnswered), poll(1, ok), poll(2, ok)},
			wantPolls: 2, wantBefore: 1,
		},
		{
			name:      "one failed poll: from its start to the next answer",
			polls:     []pollResult{poll(0, ok), poll(1, serviceNotAnswering), poll(2, ok)},
			wantPolls: 3, wantFailed: 1, wantLongest: time.Second, wantLongestPolls: 1,
			wantByClass: map[failureClass]time.Duration{serviceNotAnswering: time.Second},
		},
		{
			name: "the longest of two runs, split by class",
			polls: []pollResult{
				poll(0, ok), poll(1, apiUnreachable), poll(2, ok),
				poll(3, apiUnreachable), poll(4, apiUnreachable), poll(5, serviceNotAnswering), poll(8, ok),
			},
			wantPolls: 7, wantFailed: 4, wantLongest: 5 * time.Second, wantLongestPolls: 3,
			wantByClass: map[failureClass]time.Duration{apiUnreachable: 2 * time.Second, serviceNotAnswering: 3 * time.Second},
		},
		{
			name:      "a run still open ends at its last poll's end",
			polls:     []pollResult{poll(0, ok), poll(1, noNodeAnswered), poll(2, noNodeAnswered)},
			wantPolls: 3, wantFailed: 2, wantLongest: 1100 * time.Millisecond, wantLongestPolls: 2, wantOpen: true,
			wantByClass: map[failureClass]time.Duration{noNodeAnswered: 1100 * time.Millisecond},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := summarize(tt.polls)
			if s.Polls != tt.wantPolls || s.Failed != tt.wantFailed || s.BeforeFirstAnswer != tt.wantBefore {
				t.Errorf("polls %d failed %d before %d, want %d %d %d", s.Polls, s.Failed, s.BeforeFirstAnswer, tt.wantPolls, tt.wantFailed, tt.wantBefore)
			}
			if s.Longest.Duration() != tt.wantLongest || s.Longest.Polls != tt.wantLongestPolls || s.Longest.Open != tt.wantOpen {
				t.Errorf("longest %s over %d polls (open %t), want %s over %d (open %t)", s.Longest.Duration(), s.Longest.Polls, s.Longest.Open, tt.wantLongest, tt.wantLongestPolls, tt.wantOpen)
			}
			for c, want := range tt.wantByClass {
				if got := s.LongestByClass[c].Duration(); got != want {
					t.Errorf("longest %s %s, want %s", c, got, want)
				}
			}
			if len(s.LongestByClass) != len(tt.wantByClass) {
				t.Errorf("classes %v, want %v", s.LongestByClass, tt.wantByClass)
			}
		})
	}
}

func TestPoolBounds(t *testing.T) {
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	num := func(n int32) *intstr.IntOrString { v := intstr.FromInt32(n); return &v }
	tests := []struct {
		name     string
		strategy expinfrav1.RollingUpdate
		replicas int
		want     poolBounds
	}{
		{name: "defaults", replicas: 1, want: poolBounds{Replicas: 1, MaxSurge: 1, MaxUnavailable: 0}},
		{name: "numbers", strategy: expinfrav1.RollingUpdate{MaxSurge: num(2), MaxUnavailable: num(1)}, replicas: 4, want: poolBounds{4, 2, 1}},
		{name: "percentages round surge up and unavailable down", strategy: expinfrav1.RollingUpdate{MaxSurge: pct("25%"), MaxUnavailable: pct("25%")}, replicas: 3, want: poolBounds{3, 1, 0}},
		{name: "both zero make surge 1", strategy: expinfrav1.RollingUpdate{MaxSurge: num(0), MaxUnavailable: pct("10%")}, replicas: 3, want: poolBounds{3, 1, 0}},
		{name: "surge 0 with unavailable", strategy: expinfrav1.RollingUpdate{MaxSurge: num(0), MaxUnavailable: pct("50%")}, replicas: 4, want: poolBounds{4, 0, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resolvePoolBounds(tt.strategy, tt.replicas); got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestPoolSamples(t *testing.T) {
	now := metav1.Now()
	cm := func(name, version string, provisioned, deleting bool) infrav1.ContainerMachine {
		c := infrav1.ContainerMachine{ObjectMeta: metav1.ObjectMeta{
			Name: name, Annotations: map[string]string{poolVersionAnnotation: version},
			OwnerReferences: []metav1.OwnerReference{{Kind: "Machine", Name: name, Controller: ptr.To(true)}},
		}}
		c.Status.Initialization.Provisioned = ptr.To(provisioned)
		if deleting {
			c.DeletionTimestamp = &now
		}
		return c
	}
	machine := func(name string, nodeReady, deleting bool) clusterv1.Machine {
		m := clusterv1.Machine{ObjectMeta: metav1.ObjectMeta{Name: name}}
		m.Spec.InfrastructureRef.Name = name
		status := metav1.ConditionFalse
		if nodeReady {
			status = metav1.ConditionTrue
		}
		m.Status.Conditions = []metav1.Condition{{Type: clusterv1.MachineNodeReadyCondition, Status: status}}
		if deleting {
			m.DeletionTimestamp = &now
		}
		return m
	}
	b := poolBounds{Replicas: 1, MaxSurge: 1, MaxUnavailable: 0}
	tests := []struct {
		name                                string
		before                              []clusterv1.Machine
		cms                                 []infrav1.ContainerMachine
		after                               []clusterv1.Machine
		reached                             bool
		wantActive, wantAvailable, wantNode int
		wantErr                             string
	}{
		{
			name:   "steady",
			before: []clusterv1.Machine{machine("old", true, false)}, cms: []infrav1.ContainerMachine{cm("old", "v1", true, false)}, after: []clusterv1.Machine{machine("old", true, false)},
			reached: true, wantActive: 1, wantAvailable: 1, wantNode: 1,
		},
		{
			name:    "surge: the new one not provisioned yet, the old one stays",
			before:  []clusterv1.Machine{machine("old", true, false), machine("new", false, false)},
			cms:     []infrav1.ContainerMachine{cm("old", "v1", true, false), cm("new", "v2", false, false)},
			after:   []clusterv1.Machine{machine("old", true, false), machine("new", false, false)},
			reached: true, wantActive: 2, wantAvailable: 1, wantNode: 1,
		},
		{
			name:    "the old one deleted between the lists: each bound takes its own view",
			before:  []clusterv1.Machine{machine("old", true, false), machine("new", false, false)},
			cms:     []infrav1.ContainerMachine{cm("old", "v1", true, false), cm("new", "v2", false, false)},
			after:   []clusterv1.Machine{machine("old", true, true), machine("new", false, false)},
			reached: true, wantActive: 1, wantAvailable: 1, wantNode: 1,
		},
		{
			name:    "too many members",
			before:  []clusterv1.Machine{machine("a", true, false), machine("b", false, false), machine("c", false, false)},
			cms:     []infrav1.ContainerMachine{cm("a", "v1", true, false), cm("b", "v2", false, false), cm("c", "v2", false, false)},
			after:   []clusterv1.Machine{machine("a", true, false), machine("b", false, false), machine("c", false, false)},
			reached: true, wantActive: 3, wantAvailable: 1, wantNode: 1,
			wantErr: "3 members not being deleted, more than replicas 1 + maxSurge 1",
		},
		{
			name:    "the old one deleted before its replacement is provisioned",
			before:  []clusterv1.Machine{machine("old", true, true), machine("new", false, false)},
			cms:     []infrav1.ContainerMachine{cm("old", "v1", true, false), cm("new", "v2", false, false)},
			after:   []clusterv1.Machine{machine("old", true, true), machine("new", false, false)},
			reached: true, wantActive: 1, wantAvailable: 0, wantNode: 0,
			wantErr: "0 members provisioned and not being deleted, fewer than replicas 1 - maxUnavailable 0",
		},
		{
			name:   "a pool still coming up is not held to maxUnavailable",
			before: []clusterv1.Machine{machine("new", false, false)}, cms: []infrav1.ContainerMachine{cm("new", "v1", false, false)}, after: []clusterv1.Machine{machine("new", false, false)},
			wantActive: 1,
		},
		{
			name: "a ContainerMachine deleted with no Machine yet", cms: []infrav1.ContainerMachine{cm("x", "v1", false, true)},
			reached: true, wantErr: "0 members provisioned",
		},
		{
			name:    "a Machine whose ContainerMachine was deleted under it is a member",
			before:  []clusterv1.Machine{machine("old", true, false), machine("orphan", false, false), machine("new", false, false)},
			cms:     []infrav1.ContainerMachine{cm("old", "v1", true, false), cm("new", "v2", false, false)},
			after:   []clusterv1.Machine{machine("old", true, false), machine("orphan", false, false), machine("new", false, false)},
			reached: true, wantActive: 3, wantAvailable: 1, wantNode: 1,
			wantErr: "3 members not being deleted, more than replicas 1 + maxSurge 1",
		},
		{
			name:    "a Machine being deleted after its ContainerMachine went is not",
			before:  []clusterv1.Machine{machine("old", true, true), machine("new", true, false)},
			cms:     []infrav1.ContainerMachine{cm("new", "v2", true, false)},
			after:   []clusterv1.Machine{machine("new", true, false)},
			reached: true, wantActive: 1, wantAvailable: 1, wantNode: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := buildPoolSample(time.Now(), b, tt.before, tt.cms, tt.after)
			if s.Active != tt.wantActive || s.Available != tt.wantAvailable || s.NodeReady != tt.wantNode {
				t.Errorf("active %d available %d node-ready %d, want %d %d %d: %s", s.Active, s.Available, s.NodeReady, tt.wantActive, tt.wantAvailable, tt.wantNode, s)
			}
			err := checkPoolSample(s, tt.reached)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("unexpected violation: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("got %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestCheckRolled(t *testing.T) {
	b := poolBounds{Replicas: 1, MaxSurge: 1}
	sample := func(members ...poolMember) poolSample { return poolSample{Bounds: b, Members: members} }
	tests := []struct {
		name    string
		final   poolSample
		wantErr string
	}{
		{name: "rolled", final: sample(poolMember{Name: "new", Version: "v2", Provisioned: true}, poolMember{Name: "old", Version: "v1", Deleting: true})},
		{name: "the old member stayed", final: sample(poolMember{Name: "old", Version: "v2", Provisioned: true}), wantErr: "did not roll"},
		{name: "a new member of the old version", final: sample(poolMember{Name: "new", Version: "v1", Provisioned: true}), wantErr: `version "v1"`},
		{name: "not provisioned", final: sample(poolMember{Name: "new", Version: "v2"}), wantErr: "not provisioned"},
		{name: "too few", final: sample(poolMember{Name: "old", Version: "v1", Deleting: true}), wantErr: "0 members after the upgrade, want 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkRolled([]string{"old"}, tt.final, "v2")
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("got %v, want %q", err, tt.wantErr)
			}
		})
	}
}
