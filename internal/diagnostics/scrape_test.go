package diagnostics_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/cluster-api/util/flags"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/yaml"

	// Registers CAPCT's machine metrics, which the scrape must see.
	_ "github.com/capct/cluster-api-provider-container/internal/lifecycle"
	"github.com/capct/cluster-api-provider-container/internal/test/envtest"
)

const namespace = "capct-system"

// TestScrapeWithServiceAccountToken runs a manager as the manager's service
// account, bound to the ClusterRole that `make generate` writes from the
// RBAC markers, with the secure diagnostics endpoint that CAPCT's flags
// give by default. A scraper bound to the shipped metrics-reader role gets
// CAPCT's metrics; no token is unauthenticated; a token without the role is
// forbidden.
func TestScrapeWithServiceAccountToken(t *testing.T) {
	env, err := envtest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Errorf("failed to stop envtest: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	managerRole := clusterRole(t, "role.yaml")
	readerRole := clusterRole(t, "metrics_reader_role.yaml")
	for _, r := range []*rbacv1.ClusterRole{managerRole, readerRole} {
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, r, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	managerToken := serviceAccount(ctx, t, cs, "manager", managerRole.Name)
	scraperToken := serviceAccount(ctx, t, cs, "scraper", readerRole.Name)
	outsiderToken := serviceAccount(ctx, t, cs, "outsider", "")

	addr := freeAddress(t)
	_, metricsOptions, err := flags.GetManagerOptions(flags.ManagerOptions{TLSMinVersion: "VersionTLS12", DiagnosticsAddress: addr})
	if err != nil {
		t.Fatal(err)
	}
	asManager := rest.AnonymousClientConfig(env.Config)
	asManager.BearerToken = managerToken
	mgr, err := ctrl.NewManager(asManager, ctrl.Options{Scheme: env.Scheme, Metrics: *metricsOptions, HealthProbeBindAddress: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		t.Fatal(err)
	}
	mgrCtx, stopManager := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mgrCtx) }()
	t.Cleanup(func() {
		stopManager()
		if err := <-done; err != nil {
			t.Errorf("the manager stopped with an error: %v", err)
		}
	})

	status, body := scrape(ctx, t, addr, scraperToken)
	if status != http.StatusOK {
		t.Fatalf("a scraper bound to %s got %d: %s", readerRole.Name, status, body)
	}
	for _, metric := range []string{"capct_machine_launch_duration_seconds_bucket", "controller_runtime_webhook_requests_total"} {
		if !strings.Contains(body, metric) {
			t.Errorf("the scrape lacks %s", metric)
		}
	}
	if status, body := scrape(ctx, t, addr, ""); status != http.StatusUnauthorized {
		t.Errorf("a scrape without a token got %d, want 401: %s", status, body)
	}
	if status, body := scrape(ctx, t, addr, outsiderToken); status != http.StatusForbidden {
		t.Errorf("a scrape with an unbound service account got %d, want 403: %s", status, body)
	}
}

// clusterRole reads a ClusterRole from config/rbac, so that the test checks
// the manifests that ship.
func clusterRole(t *testing.T, file string) *rbacv1.ClusterRole {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "config", "rbac", file))
	if err != nil {
		t.Fatal(err)
	}
	r := &rbacv1.ClusterRole{}
	if err := yaml.UnmarshalStrict(b, r); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return r
}

// serviceAccount creates a service account bound to role (none when empty)
// and returns a token from the TokenRequest API.
func serviceAccount(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, role string) string {
	t.Helper()
	if _, err := cs.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if role != "" {
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-" + role},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: namespace}},
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s: %v", name, err)
	}
	return tr.Status.Token
}

func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// scrape GETs /metrics with token, retrying while the server is not yet
// listening. The server's certificate is self-signed.
func scrape(ctx context.Context, t *testing.T, addr, token string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the test server's certificate is self-signed
	}}
	var lastErr error
	for range 100 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("https://%s/metrics", addr), nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			b, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			return resp.StatusCode, string(b)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("the metrics endpoint never answered: %v", lastErr)
	return 0, ""
}
