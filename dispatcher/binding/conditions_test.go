package binding

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestConditions(t *testing.T) {
	ok := func(m string) ReplicaHealth {
		return ReplicaHealth{Member: m, Health: Health{State: StateConsuming, Summary: "nats queue \"IN\""}}
	}
	bad := func(m, reason, msg string) ReplicaHealth {
		return ReplicaHealth{Member: m, Health: Health{State: StateError, Reason: reason, Message: msg}}
	}
	for _, tc := range []struct {
		name                   string
		v                      View
		ready, degraded        metav1.ConditionStatus
		readyReason, degReason string
		msg                    string // in the Degraded (or, when not Ready, the Ready) message
	}{
		{"two consuming", View{Replicas: []ReplicaHealth{ok("b"), ok("a")}, PoolReady: 2}, "True", "False", "Consuming", "AsExpected", ""},
		{"nobody", View{PoolReady: 2}, "False", "False", "NoDispatcher", "AsExpected", ""},
		{"all failing", View{Replicas: []ReplicaHealth{bad("a", "ProviderUnavailable", "connect: refused"), bad("b", "ProviderUnavailable", "connect: refused")}, PoolReady: 1},
			"False", "False", "ProviderUnavailable", "AsExpected", "connect: refused (and 1 more replicas)"},
		{"one replica failing", View{Replicas: []ReplicaHealth{ok("a"), bad("b", "ProviderUnavailable", "fetch: timeout")}, PoolReady: 1},
			"True", "True", "Consuming", "ProviderUnavailable", "replica b: fetch: timeout"},
		{"pool not ready", View{Replicas: []ReplicaHealth{ok("a")}, Pool: "p", PoolReady: 0}, "True", "True", "Consuming", "PoolNotReady", "AgentPool p has no ready replica"},
		{"dead letters", View{Replicas: []ReplicaHealth{ok("a")}, PoolReady: 1, RecentDeadLetters: 3, Window: "5m0s", DeadLetterQueue: "dlq"},
			"True", "True", "Consuming", "MessagesDeadLettered", `3 message(s) dead-lettered to "dlq" in the last 5m0s`},
		{"tool binding has no pool", View{Replicas: []ReplicaHealth{ok("a")}, PoolReady: -1}, "True", "False", "Consuming", "AsExpected", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, d := Conditions(4, tc.v)
			if r.Status != tc.ready || d.Status != tc.degraded || r.Reason != tc.readyReason || d.Reason != tc.degReason || r.ObservedGeneration != 4 {
				t.Fatalf("ready %s/%s degraded %s/%s: %q / %q", r.Status, r.Reason, d.Status, d.Reason, r.Message, d.Message)
			}
			msg := d.Message
			if r.Status == "False" {
				msg = r.Message
			}
			if tc.msg != "" && !strings.Contains(msg, tc.msg) {
				t.Fatalf("message %q does not say %q", msg, tc.msg)
			}
		})
	}
}
