package lifecycle

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
)

func TestLivenessTimeouts(t *testing.T) {
	testCases := []struct {
		name       string
		ttl        *metav1.Duration
		registered bool
		// machineAt is when the machine's Machine was made, after the
		// launch (a warm machine promoted then); -1 for no Machine.
		machineAt time.Duration
		step      time.Duration
		wantType  string
		wantFail  bool
	}{
		{name: "registration within the default TTL", step: DefaultRegistrationTTL - time.Second, wantType: infrav1.RegisteredCondition},
		{name: "registration past the default TTL", step: DefaultRegistrationTTL, wantType: infrav1.RegisteredCondition, wantFail: true},
		{name: "registration past a custom TTL", ttl: &metav1.Duration{Duration: time.Minute}, step: time.Minute, wantType: infrav1.RegisteredCondition, wantFail: true},
		{name: "initialization within the TTL", registered: true, step: DefaultInitializationTTL - time.Second, wantType: infrav1.InitializedCondition},
		{name: "initialization past the TTL", registered: true, step: DefaultInitializationTTL, wantType: infrav1.InitializedCondition, wantFail: true},
		// A warm machine launched long before its pool promoted it is
		// asked to register from its Machine's creation, not its launch.
		{name: "registration of a promoted warm machine counts from its Machine", machineAt: time.Hour, step: time.Hour + DefaultRegistrationTTL - time.Second, wantType: infrav1.RegisteredCondition},
		{name: "registration of a promoted warm machine past the TTL", machineAt: time.Hour, step: time.Hour + DefaultRegistrationTTL, wantType: infrav1.RegisteredCondition, wantFail: true},
		{name: "a warm machine is never timed out", machineAt: -1, step: 24 * time.Hour, wantType: infrav1.RegisteredCondition},
	}
	for _, tc := range testCases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, cloudConfig)
			s := e.scope()
			cm := s.ContainerMachine
			cm.Spec.Lifecycle.RegistrationTTL = tc.ttl
			setCondition(cm, e.clock.Now(), infrav1.LaunchedCondition, metav1.ConditionTrue, infrav1.SucceededReason, "")
			switch {
			case tc.machineAt < 0:
				s.Machine = nil
			default:
				s.Machine.CreationTimestamp = metav1.NewTime(e.clock.Now().Add(tc.machineAt))
			}
			if tc.registered {
				setCondition(cm, e.clock.Now(), infrav1.RegisteredCondition, metav1.ConditionTrue, infrav1.SucceededReason, "")
			}
			e.clock.Step(tc.step)
			phase := map[string]string{infrav1.RegisteredCondition: "registration", infrav1.InitializedCondition: "initialization"}[tc.wantType]
			terminations := testutil.ToFloat64(livenessTerminations.WithLabelValues(phase))
			res, err := e.deps.liveness().Reconcile(context.Background(), s)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.wantFail {
				wantRequeue := time.Second
				if s.Machine == nil {
					wantRequeue = 0
				}
				if res.RequeueAfter != wantRequeue || TerminalCondition(cm) != nil {
					t.Fatalf("want a requeue in %s and no failure, got %v, %v", wantRequeue, res, TerminalCondition(cm))
				}
				return
			}
			wantCondition(t, s, tc.wantType, metav1.ConditionFalse, infrav1.TimedOutReason)
			if got := testutil.ToFloat64(livenessTerminations.WithLabelValues(phase)); got != terminations+1 {
				t.Fatalf("want the %s termination counter to grow by one, it went from %v to %v", phase, terminations, got)
			}
			SetReadyCondition(cm, e.clock.Now())
			wantCondition(t, s, infrav1.ReadyCondition, metav1.ConditionFalse, infrav1.TimedOutReason)
			select {
			case ev := <-e.recorder.Events:
				if !strings.Contains(ev, infrav1.TimedOutReason) {
					t.Fatalf("unexpected event %q", ev)
				}
			default:
				t.Fatal("no event for the termination")
			}
		})
	}
}
