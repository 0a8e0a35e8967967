package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	capicontrollers "sigs.k8s.io/cluster-api/controllers"
	"sigs.k8s.io/cluster-api/controllers/clustercache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

// Cluster API's reconcilers run in a process of their own, this binary
// re-executed with -role capi: in a management cluster they are another
// pod's (capi-controller-manager), so the resident set that issue #36
// bounds is CAPCT's process's without them. The child reaches the API
// server with a kubeconfig the parent writes, and the workload clusters
// through the parent's workload proxy (the kubeconfig Secrets point there,
// with no credentials), so the proxy still counts its requests to them.

// roleCAPI is the -role of the child process.
const roleCAPI = "capi"

// The child's stdout carries only these lines: readyLine once its manager
// runs with its caches synced, then reportPrefix and its childReport as
// JSON once it has stopped. Its logs go to stderr, which it shares with the
// parent.
const (
	readyLine    = "ready"
	reportPrefix = "report "
)

// capiStopGrace bounds how long Cluster API's process may take to stop and
// report once told to.
const capiStopGrace = 30 * time.Second

// childReport is what Cluster API's process hands the parent when it
// stops: its memory, its requests to the management cluster (its own
// counter's, the same semantics as the parent's) and its reconciles.
type childReport struct {
	// BaselineRSSMiB is the resident set once its caches had synced.
	BaselineRSSMiB float64 `json:"baselineRSSMiB"`
	// PeakHeapMiB is the sampled peak HeapAlloc, PeakRSSMiB the kernel's
	// VmHWM, both read when the parent told it to stop, before it did.
	PeakHeapMiB float64         `json:"peakHeapMiB"`
	PeakRSSMiB  float64         `json:"peakRSSMiB"`
	Requests    []requestRecord `json:"requests"`
	Reconciles  map[string]int  `json:"reconciles"`
}

// runClusterAPIProcess is the child's main: Cluster API's Cluster and
// Machine reconcilers on a manager of their own until the parent closes
// stdin or sends SIGTERM (or SIGINT), then the report on stdout.
func runClusterAPIProcess(kubeconfig string) error {
	if kubeconfig == "" {
		return errors.New("-role capi needs -kubeconfig")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mem memorySampler
	go mem.run(ctx, 200*time.Millisecond)

	// The peak is read when the parent asks the process to stop, before the
	// manager winds down, as the parent would read it from /proc.
	var (
		stopOnce          sync.Once
		peakRSS, peakHeap uint64
	)
	stop := func() {
		stopOnce.Do(func() {
			mem.sample()
			peakRSS, peakHeap = procStatus("VmHWM"), mem.peak()
			cancel()
		})
	}
	go func() {
		// EOF: the parent closed stdin, or died.
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	go func() {
		select {
		case <-sigs:
			stop()
		case <-ctx.Done():
		}
	}()

	requests := newRequestCounter()
	mgr, err := newClusterAPIManager(kubeconfig, requests)
	if err != nil {
		return err
	}
	if err := setupClusterAPI(ctx, mgr); err != nil {
		return err
	}
	var baselineRSS uint64
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		// A runnable that needs leader election starts after the manager's
		// caches; the informers of Cluster API's two kinds are synced too,
		// so that the parent's clock starts with Cluster API watching.
		for _, obj := range []client.Object{&clusterv1.Cluster{}, &clusterv1.Machine{}} {
			if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
				return fmt.Errorf("failed to get the %T informer: %w", obj, err)
			}
		}
		if !mgr.GetCache().WaitForCacheSync(ctx) {
			return nil
		}
		baselineRSS = procStatus("VmRSS")
		fmt.Println(readyLine)
		return nil
	})); err != nil {
		return fmt.Errorf("failed to add the readiness signal: %w", err)
	}
	runErr := mgr.Start(ctx)
	stop()
	if runErr != nil {
		runErr = fmt.Errorf("failed to run Cluster API's manager: %w", runErr)
	}
	rep := childReport{
		BaselineRSSMiB: toMiB(baselineRSS), PeakHeapMiB: toMiB(peakHeap), PeakRSSMiB: toMiB(peakRSS),
		Requests: requests.snapshot(), Reconciles: reconcileTotals(),
	}
	b, err := json.Marshal(rep)
	if err != nil {
		return errors.Join(runErr, fmt.Errorf("failed to encode the report: %w", err))
	}
	if _, err := fmt.Printf("%s%s\n", reportPrefix, b); err != nil {
		return errors.Join(runErr, fmt.Errorf("failed to write the report: %w", err))
	}
	return runErr
}

// newClusterAPIManager builds Cluster API's manager as its main.go does
// for what the benchmark runs: its rate limits and user agent (counted on
// its own counter), its sync period, ConfigMaps and Secrets never cached,
// unstructured reads from the cache; no leader election, no metrics
// server, no health probes (one replica, nothing probes it).
func newClusterAPIManager(kubeconfig string, requests *requestCounter) (ctrl.Manager, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("failed to load the kubeconfig %s: %w", kubeconfig, err)
	}
	managerConfig(cfg, capiAgent, 100, 200, requests)
	scheme, err := envtest.NewScheme()
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		LeaderElection:         false,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{SyncPeriod: ptr.To(managerSyncPeriod)},
		Client: client.Options{Cache: &client.CacheOptions{
			DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}, Unstructured: true}},
	})
	if err != nil {
		return nil, fmt.Errorf("failed to create Cluster API's manager: %w", err)
	}
	return mgr, nil
}

// setupClusterAPI adds Cluster API's Cluster and Machine reconcilers and
// their ClusterCache to Cluster API's manager, with Cluster API's defaults
// (concurrency, the ClusterCache's client rate limits and Node index).
func setupClusterAPI(ctx context.Context, mgr ctrl.Manager) error {
	c, reader := mgr.GetClient(), mgr.GetAPIReader()
	cc, err := clustercache.SetupWithManager(ctx, mgr, clustercache.Options{
		SecretClient: c,
		Cache:        clustercache.CacheOptions{Indexes: []clustercache.CacheOptionsIndex{clustercache.NodeProviderIDIndex}},
		Client: clustercache.ClientOptions{QPS: 20, Burst: 30, UserAgent: capiAgent,
			Cache: clustercache.ClientCacheOptions{DisableFor: []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}}}},
	}, controller.Options{MaxConcurrentReconciles: 100})
	if err != nil {
		return fmt.Errorf("failed to set up Cluster API's ClusterCache: %w", err)
	}
	opts := controller.Options{MaxConcurrentReconciles: 10}
	if err := (&capicontrollers.ClusterReconciler{Client: c, APIReader: reader, ClusterCache: cc, RemoteConnectionGracePeriod: time.Minute}).
		SetupWithManager(ctx, mgr, opts); err != nil {
		return fmt.Errorf("failed to set up Cluster API's Cluster controller: %w", err)
	}
	if err := (&capicontrollers.MachineReconciler{Client: c, APIReader: reader, ClusterCache: cc, RemoteConditionsGracePeriod: 5 * time.Minute}).
		SetupWithManager(ctx, mgr, opts); err != nil {
		return fmt.Errorf("failed to set up Cluster API's Machine controller: %w", err)
	}
	return nil
}

// capiProcess is the parent's handle on Cluster API's process.
type capiProcess struct {
	cmd        *exec.Cmd
	stdin      io.WriteCloser
	out        *childOutput
	kubeconfig string

	// exited is closed once the process has exited; waitErr is then
	// cmd.Wait's error.
	exited  chan struct{}
	waitErr error
}

// startClusterAPIProcess re-executes this binary as Cluster API's process.
// ctx bounds it: when ctx ends the child gets SIGTERM (it stops and
// reports), and SIGKILL capiStopGrace later. The kernel kills it
// (Pdeathsig) if the parent dies without stopping it, and it stops by
// itself when its stdin, held by the parent, closes.
func startClusterAPIProcess(ctx context.Context, admin *rest.Config) (*capiProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("failed to find this program to run Cluster API's process: %w", err)
	}
	kubeconfig, err := writeAdminKubeconfig(admin)
	if err != nil {
		return nil, err
	}
	args := []string{"-role", roleCAPI, "-kubeconfig", kubeconfig}
	args = append(args, logFlags()...)
	p := &capiProcess{out: newChildOutput(os.Stderr), kubeconfig: kubeconfig, exited: make(chan struct{})}
	p.cmd = exec.CommandContext(ctx, exe, args...)
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(syscall.SIGTERM) }
	p.cmd.WaitDelay = capiStopGrace
	p.cmd.SysProcAttr = childSysProcAttr()
	// The same file as the parent's logs: make bench-scale's scale-<n>.log.
	p.cmd.Stderr = os.Stderr
	p.cmd.Stdout = p.out
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		p.removeKubeconfig()
		return nil, fmt.Errorf("failed to create Cluster API's process's stdin: %w", err)
	}
	if err := p.cmd.Start(); err != nil {
		p.removeKubeconfig()
		return nil, fmt.Errorf("failed to start Cluster API's process: %w", err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// logFlags are the parent's klog verbosity flags, for the child's logs.
func logFlags() []string {
	var args []string
	for _, name := range []string{"v", "vmodule"} {
		if f := lookupSetFlag(name); f != "" {
			args = append(args, "-"+name+"="+f)
		}
	}
	return args
}

// waitReady waits until the child's manager runs with its caches synced.
func (p *capiProcess) waitReady(ctx context.Context) error {
	select {
	case <-p.out.ready:
		// The child has read its kubeconfig: the credentials need not stay
		// on disk.
		p.removeKubeconfig()
		return nil
	case <-p.exited:
		return fmt.Errorf("failed to start Cluster API's process: it exited: %w", p.exitErr())
	case <-ctx.Done():
		return fmt.Errorf("failed to start Cluster API's process: %w", ctx.Err())
	}
}

// exitErr is why the process exited, once it has.
func (p *capiProcess) exitErr() error {
	if p.waitErr == nil {
		return errors.New("exit status 0")
	}
	return p.waitErr
}

// stop tells the child to stop (its stdin closes), waits up to grace for
// it to exit, killing it then, and returns its report.
func (p *capiProcess) stop(grace time.Duration) (*childReport, error) {
	_ = p.stdin.Close() // the child stops either way: EOF or SIGKILL below
	timer := time.NewTimer(grace)
	defer timer.Stop()
	var err error
	select {
	case <-p.exited:
	case <-timer.C:
		err = fmt.Errorf("failed to stop Cluster API's process within %s: killed it", grace)
		p.kill()
	}
	p.removeKubeconfig()
	rep, repErr := p.out.report()
	if repErr != nil {
		return nil, errors.Join(err, repErr, p.waitErrIfFailed())
	}
	return rep, errors.Join(err, p.waitErrIfFailed())
}

// waitErrIfFailed is the child's exit error, nil when it exited cleanly,
// including after the parent's context ended (SIGTERM from Cancel).
func (p *capiProcess) waitErrIfFailed() error {
	if p.waitErr == nil || errors.Is(p.waitErr, context.DeadlineExceeded) || errors.Is(p.waitErr, context.Canceled) {
		return nil
	}
	return fmt.Errorf("failed to run Cluster API's process: %w", p.waitErr)
}

// kill ends the process now if it still runs and waits until it has
// exited; every return path of the parent goes through it.
func (p *capiProcess) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill() // fails only when it has just exited
		<-p.exited
	}
	p.removeKubeconfig()
}

func (p *capiProcess) removeKubeconfig() {
	if err := os.Remove(p.kubeconfig); err != nil && !errors.Is(err, os.ErrNotExist) {
		fmt.Fprintf(os.Stderr, "failed to remove %s: %v\n", p.kubeconfig, err)
	}
}

// writeAdminKubeconfig writes a kubeconfig for the API server with the
// administrator's credentials of admin into a file of its own (0600, in
// the temporary directory, not in -out, where results are kept), for
// Cluster API's process.
func writeAdminKubeconfig(admin *rest.Config) (string, error) {
	b, err := adminKubeconfig(admin)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "bench-scale-capi-*.kubeconfig") // mode 0600
	if err != nil {
		return "", fmt.Errorf("failed to create the kubeconfig of Cluster API's process: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		_ = f.Close()
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("failed to write the kubeconfig of Cluster API's process: %w", err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("failed to write the kubeconfig of Cluster API's process: %w", err)
	}
	return f.Name(), nil
}

// adminKubeconfig is admin as a kubeconfig: the server, its CA and the
// client's credentials, whichever of data, files or token it has.
func adminKubeconfig(admin *rest.Config) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["envtest"] = &clientcmdapi.Cluster{
		Server: admin.Host, TLSServerName: admin.ServerName, InsecureSkipTLSVerify: admin.Insecure,
		CertificateAuthority: admin.CAFile, CertificateAuthorityData: admin.CAData,
	}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificate: admin.CertFile, ClientCertificateData: admin.CertData,
		ClientKey: admin.KeyFile, ClientKeyData: admin.KeyData,
		Token: admin.BearerToken, TokenFile: admin.BearerTokenFile, Username: admin.Username, Password: admin.Password,
	}
	cfg.Contexts["envtest"] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "admin"}
	cfg.CurrentContext = "envtest"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to write the kubeconfig of Cluster API's process: %w", err)
	}
	return b, nil
}

// childOutput reads the child's stdout: the ready line, the report, and
// anything else (a library printing to stdout), which goes to other.
type childOutput struct {
	other io.Writer
	ready chan struct{}

	mu        sync.Mutex
	line      []byte
	readyOnce sync.Once
	rep       []byte
}

func newChildOutput(other io.Writer) *childOutput {
	return &childOutput{other: other, ready: make(chan struct{})}
}

func (o *childOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.line = append(o.line, p...)
	for {
		i := bytes.IndexByte(o.line, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := o.line[:i]
		switch {
		case string(line) == readyLine:
			o.readyOnce.Do(func() { close(o.ready) })
		case bytes.HasPrefix(line, []byte(reportPrefix)):
			o.rep = bytes.Clone(line[len(reportPrefix):])
		default:
			_, _ = fmt.Fprintf(o.other, "capi stdout: %s\n", line) // best effort, as a log line
		}
		o.line = o.line[i+1:]
	}
}

// report decodes the child's report, once the child has exited.
func (o *childOutput) report() (*childReport, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.rep == nil {
		return nil, errors.New("failed to get Cluster API's process's report: it wrote none")
	}
	var rep childReport
	if err := json.Unmarshal(o.rep, &rep); err != nil {
		return nil, fmt.Errorf("failed to decode Cluster API's process's report: %w", err)
	}
	return &rep, nil
}
