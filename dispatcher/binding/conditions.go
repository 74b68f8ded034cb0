package binding

import (
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types the dispatcher sets on ToolBindings.
const (
	// ConditionReady: the binding is served (a dispatched queue is consumed; a tool is callable
	// through the tool proxy).
	ConditionReady = "Ready"
	// ConditionDegraded: it is served with a problem (a replica failing, the pool without ready
	// replicas, messages dead-lettered recently).
	ConditionDegraded = "Degraded"
)

// ReplicaHealth is one dispatcher replica's report on a binding.
type ReplicaHealth struct {
	// Member names the replica.
	Member string
	Health
}

// View is what the conditions are computed from.
type View struct {
	// Replicas are the live replicas' reports (stale ones left out).
	Replicas []ReplicaHealth
	// PoolReady is the bound pool's ready replicas (-1 for a tool binding).
	PoolReady int
	// Pool names the pool.
	Pool string
	// RecentDeadLetters is the number dead-lettered within the recent window, with the window.
	RecentDeadLetters int64
	Window            string
	// DeadLetterQueue names the destination.
	DeadLetterQueue string
}

// Conditions computes Ready and Degraded (pure; observedGeneration gen).
func Conditions(gen int64, v View) (ready, degraded metav1.Condition) {
	ready = metav1.Condition{Type: ConditionReady, ObservedGeneration: gen}
	degraded = metav1.Condition{Type: ConditionDegraded, ObservedGeneration: gen, Status: metav1.ConditionFalse, Reason: "AsExpected", Message: "no problem seen"}
	rs := append([]ReplicaHealth(nil), v.Replicas...)
	sort.Slice(rs, func(i, j int) bool { return rs[i].Member < rs[j].Member })
	var ok, bad []ReplicaHealth
	for _, r := range rs {
		if r.State == StateConsuming {
			ok = append(ok, r)
		} else {
			bad = append(bad, r)
		}
	}
	switch {
	case len(rs) == 0:
		ready.Status, ready.Reason, ready.Message = metav1.ConditionFalse, "NoDispatcher", "no live dispatcher replica reports this binding"
	case len(ok) == 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, bad[0].Reason
		ready.Message = bad[0].Message
		if len(bad) > 1 {
			ready.Message = fmt.Sprintf("%s (and %d more replicas)", bad[0].Message, len(bad)-1)
		}
	default:
		ready.Status, ready.Reason = metav1.ConditionTrue, "Consuming"
		if ok[0].ReadyReason != "" {
			ready.Reason = ok[0].ReadyReason
		}
		ready.Message = fmt.Sprintf("%d dispatcher replica(s) serve %s", len(ok), ok[0].Summary)
	}
	var problems []string
	reason := ""
	if len(ok) > 0 && len(bad) > 0 {
		reason = bad[0].Reason
		for _, b := range bad {
			problems = append(problems, fmt.Sprintf("replica %s: %s", b.Member, b.Message))
		}
	}
	if v.PoolReady == 0 {
		if reason == "" {
			reason = "PoolNotReady"
		}
		problems = append(problems, fmt.Sprintf("AgentPool %s has no ready replica: messages wait in the queue", v.Pool))
	}
	if v.RecentDeadLetters > 0 {
		if reason == "" {
			reason = "MessagesDeadLettered"
		}
		problems = append(problems, fmt.Sprintf("%d message(s) dead-lettered to %q in the last %s", v.RecentDeadLetters, v.DeadLetterQueue, v.Window))
	}
	if len(problems) > 0 {
		degraded.Status, degraded.Reason, degraded.Message = metav1.ConditionTrue, reason, strings.Join(problems, "; ")
	}
	return ready, degraded
}
