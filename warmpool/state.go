// Package warmpool is the pure warm-pool policy shared by the AgentPool reconciler and the
// autoscaling simulator: the pod state machine (idle → warm → serving → draining → idle) and the
// planner that turns a desired serving count, a warm target and the observed pods into actions.
// It imports no Kubernetes client code.
package warmpool

import "fmt"

// State is a pool pod's place in the warm-pool life cycle.
type State string

// The states. Idle is a pod that does not exist yet (or no longer exists).
const (
	Idle     State = "idle"
	Warm     State = "warm"
	Serving  State = "serving"
	Draining State = "draining"
)

// transitions lists the allowed moves. Invariant: a pod only enters Serving from Warm or by being
// created serving (Idle → Serving, a cold start), and only Draining leads back to Idle.
var transitions = map[State][]State{
	Idle:     {Warm, Serving},
	Warm:     {Serving, Draining},
	Serving:  {Draining, Warm},
	Draining: {Idle},
}

// CanTransition reports whether a pod may move from one state to another.
func CanTransition(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Transition returns to when the move is allowed, and an error naming both states otherwise.
func Transition(from, to State) (State, error) {
	if !CanTransition(from, to) {
		return from, fmt.Errorf("warmpool: transition %s → %s is not allowed", from, to)
	}
	return to, nil
}

// ParseState maps a label value to a State; unknown values are an error.
func ParseState(s string) (State, error) {
	switch State(s) {
	case Warm, Serving, Draining:
		return State(s), nil
	}
	return "", fmt.Errorf("warmpool: unknown pod state %q", s)
}
