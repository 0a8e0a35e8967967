package lifecycle

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Phase durations, in seconds, let operators see where machines spend their
// time: launch counts from the ContainerMachine's creation, bootstrap from
// its start, registration from launch, initialization from registration.
var (
	phaseBuckets = []float64{0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 900}

	launchDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "capct_machine_launch_duration_seconds", Help: "Time from a ContainerMachine's creation to its running container.", Buckets: phaseBuckets,
	})
	bootstrapDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "capct_machine_bootstrap_duration_seconds", Help: "Time taken to run a machine's bootstrap data.", Buckets: phaseBuckets,
	})
	registrationDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "capct_machine_registration_duration_seconds", Help: "Time from launch to the machine's Node registering.", Buckets: phaseBuckets,
	})
	initializationDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "capct_machine_initialization_duration_seconds", Help: "Time from registration to the Node being Ready and initialized.", Buckets: phaseBuckets,
	})
	livenessTerminations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "capct_machine_liveness_terminations_total", Help: "Machines marked failed because a phase exceeded its TTL.",
	}, []string{"phase"})
)

func init() {
	metrics.Registry.MustRegister(launchDuration, bootstrapDuration, registrationDuration, initializationDuration, livenessTerminations)
}
