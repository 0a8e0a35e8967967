package nodeipam

import (
	"github.com/prometheus/client_golang/prometheus"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/capct/cluster-api-provider-container/internal/ipam"
)

var (
	cidrsInUse = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "capct_nodeipam_cidrs_in_use",
		Help: "Node pod CIDRs held by ContainerMachines or Nodes, per cluster and IP family, as of the last rebuild.",
	}, []string{"namespace", "cluster", "family"})
	cidrsTotal = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "capct_nodeipam_cidrs_total",
		Help: "Node pod CIDRs the cluster's pod network holds, per cluster and IP family.",
	}, []string{"namespace", "cluster", "family"})
	allocationFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "capct_nodeipam_allocation_failures_total",
		Help: "Failed attempts to give a machine its pod CIDRs, by condition reason.",
	}, []string{"reason"})
)

func init() {
	metrics.Registry.MustRegister(cidrsInUse, cidrsTotal, allocationFailures)
}

func family(u ipam.FamilyUsage) string {
	if u.ClusterCIDR.Addr().Is4() {
		return "IPv4"
	}
	return "IPv6"
}

func recordUsage(cluster *clusterv1.Cluster, usage []ipam.FamilyUsage) {
	for _, u := range usage {
		cidrsInUse.WithLabelValues(cluster.Namespace, cluster.Name, family(u)).Set(float64(u.InUse))
		cidrsTotal.WithLabelValues(cluster.Namespace, cluster.Name, family(u)).Set(float64(u.Total))
	}
}

func forgetUsage(cluster *clusterv1.Cluster) {
	l := prometheus.Labels{"namespace": cluster.Namespace, "cluster": cluster.Name}
	cidrsInUse.DeletePartialMatch(l)
	cidrsTotal.DeletePartialMatch(l)
}
