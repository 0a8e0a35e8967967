package engines

import (
	"time"

	"sigs.k8s.io/cluster-api/util/conditions"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

// LostAfter is how long an engine must go unanswered before its clusters
// stop offering it as a failure domain (docs/multihost.md, section 6):
// long enough that a lost packet or an engine restart does not make the
// list flap, and KubeadmControlPlane does not move machines for it.
const LostAfter = time.Minute

// Answers reports whether CAPCT reaches engine, as its Available condition
// says: new machines are placed only on engines that answer.
func Answers(engine *infrav1.ContainerEngine) bool {
	return conditions.IsTrue(engine, infrav1.EngineAvailableCondition)
}

// LostFor returns how long engine has not answered: zero while it answers,
// and since its Available condition turned False (or since it was created,
// for an engine never reached).
func LostFor(engine *infrav1.ContainerEngine, now time.Time) time.Duration {
	if Answers(engine) {
		return 0
	}
	since := engine.CreationTimestamp
	if c := conditions.Get(engine, infrav1.EngineAvailableCondition); c != nil {
		since = c.LastTransitionTime
	}
	return max(now.Sub(since.Time), time.Nanosecond)
}
