package lifecycle

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

func TestPodCIDRRetryBacksOffWhileExhausted(t *testing.T) {
	testCases := []struct {
		name    string
		reason  string
		elapsed time.Duration
		want    time.Duration
	}{
		{"not exhausted", infrav1.PodCIDRConflictReason, time.Hour, nodePoll},
		{"just exhausted", infrav1.ExhaustedReason, 0, nodePoll},
		{"exhausted for a minute", infrav1.ExhaustedReason, time.Minute, time.Minute},
		{"exhausted for an hour", infrav1.ExhaustedReason, time.Hour, maxPodCIDRRetry},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			cm := &infrav1.ContainerMachine{}
			setCondition(cm, start, infrav1.PodCIDRAllocatedCondition, metav1.ConditionFalse, tc.reason, "")
			if got := podCIDRRetry(cm, start.Add(tc.elapsed)); got != tc.want {
				t.Fatalf("want %s, got %s", tc.want, got)
			}
		})
	}
}
