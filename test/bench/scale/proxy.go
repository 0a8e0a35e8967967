package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// clusterLabel marks each simulated Node with its cluster. All workload
// clusters are the one envtest API server, so without it every cluster
// would see every cluster's Nodes: node IPAM would count the other
// clusters' pod CIDRs as bad records, and each cluster's Node informer
// would hold all of them.
const clusterLabel = "bench.capct.io/cluster"

func clusterLabelValue(namespace, name string) string { return namespace + "." + name }

// workloadProxy gives each cluster its own view of the API server: its
// kubeconfig points at /clusters/<namespace>/<name>/ here, and lists and
// watches of Nodes through that prefix only return the cluster's Nodes.
// It counts the requests that the ClusterCaches (Cluster API's and CAPCT's
// access to workload clusters) make: CAPCT's from this process and Cluster
// API's from its own, which reads the same kubeconfig Secrets, told apart
// by user agent.
type workloadProxy struct {
	url      string
	requests *requestCounter
	server   *http.Server
}

// workloadPrefix marks the workload clusters' requests in the counter.
const workloadPrefix = "workload:"

// startWorkloadProxy serves until ctx ends. admin reaches the API server.
func startWorkloadProxy(ctx context.Context, admin *rest.Config, requests *requestCounter) (*workloadProxy, error) {
	transport, err := rest.TransportFor(admin)
	if err != nil {
		return nil, fmt.Errorf("failed to build the workload proxy's transport: %w", err)
	}
	target, err := url.Parse(admin.Host)
	if err != nil {
		return nil, fmt.Errorf("failed to parse the API server address %q: %w", admin.Host, err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("failed to listen for the workload proxy: %w", err)
	}
	p := &workloadProxy{url: "http://" + l.Addr().String(), requests: requests}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			// /clusters/<namespace>/<name>/<path>
			parts := strings.SplitN(strings.TrimPrefix(r.In.URL.Path, "/clusters/"), "/", 3)
			rest := "/"
			if len(parts) == 3 {
				rest += parts[2]
			}
			p.requests.add(workloadPrefix, r.In.Header.Get("User-Agent"), r.In.Method, &url.URL{Path: rest, RawQuery: r.In.URL.RawQuery})
			r.SetURL(target)
			r.Out.URL.Path, r.Out.URL.RawPath = rest, ""
			if rest == "/api/v1/nodes" && len(parts) >= 2 {
				q := r.Out.URL.Query()
				sel := clusterLabel + "=" + clusterLabelValue(parts[0], parts[1])
				if s := q.Get("labelSelector"); s != "" {
					sel = s + "," + sel
				}
				q.Set("labelSelector", sel)
				r.Out.URL.RawQuery = q.Encode()
			}
		},
		Transport: transport,
		// Watches stream: pass each event on at once.
		FlushInterval: -1,
	}
	p.server = &http.Server{Handler: rp, ReadHeaderTimeout: 0}
	go func() {
		<-ctx.Done()
		_ = p.server.Close()
	}()
	go func() {
		if err := p.server.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Printf("workload proxy stopped: %v\n", err)
		}
	}()
	return p, nil
}

// kubeconfig is the value of a Cluster's <name>-kubeconfig Secret: the
// proxy's prefix for the cluster on loopback, no credentials (the proxy
// has them), so that both processes' ClusterCaches go through the proxy.
func (p *workloadProxy) kubeconfig(cluster *clusterv1.Cluster) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["workload"] = &clientcmdapi.Cluster{Server: fmt.Sprintf("%s/clusters/%s/%s", p.url, cluster.Namespace, cluster.Name)}
	cfg.AuthInfos["workload"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["workload"] = &clientcmdapi.Context{Cluster: "workload", AuthInfo: "workload"}
	cfg.CurrentContext = "workload"
	b, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to write the kubeconfig of Cluster %s/%s: %w", cluster.Namespace, cluster.Name, err)
	}
	return b, nil
}
