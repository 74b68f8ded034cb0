// Package agentsession holds the lifecycle of AgentSessions (docs/sessions.md): a pure decision
// core (Decide) that, from what a reconcile observed and the time, says the next step of
// Pending → Running → Suspending → Suspended → Resuming → Running.
package agentsession

import (
	"time"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Op is the outcome of an AgentCheckpoint the session waits for.
type Op int

// AgentCheckpoint outcomes.
const (
	// OpNone: no such AgentCheckpoint exists.
	OpNone Op = iota
	// OpRunning: it exists and has not finished.
	OpRunning
	// OpSucceeded: it finished and stored (or restored) the checkpoint.
	OpSucceeded
	// OpFailed: it finished with an error.
	OpFailed
)

// Observed is what one reconcile read about a session.
type Observed struct {
	Phase nnv1.AgentSessionPhase
	// Suspend is spec.suspend; IdleTimeout spec.idleTimeout (0: none).
	Suspend     bool
	IdleTimeout time.Duration
	// LastActivity is the later of the activity annotation and the last start or resume.
	LastActivity time.Time
	// PhaseSince is when the current phase began (status.transitionTime).
	PhaseSince time.Time
	// SuspendedByRequest is status.suspendedByRequest.
	SuspendedByRequest bool
	// PodExists, PodRunning, PodReady: the session's current pod (status.podName) exists, runs
	// (phase Running) and is Ready.
	PodExists, PodRunning, PodReady bool
	// PodTerminating: the current pod is being deleted (an eviction, a NoExecute taint) and
	// still runs, in its preStop hold (holdForCheckpoint); PodExists is false then.
	PodTerminating bool
	// Checkpoint is the outcome of the current suspension's Checkpoint AgentCheckpoint, Restore
	// that of the current resume's Restore.
	Checkpoint, Restore Op
	// HasCheckpoint: status.lastCheckpoint is set.
	HasCheckpoint bool
	// NodeDraining: the current pod's node (a terminating pod's too) is cordoned or has an
	// interruption taint (interruption.Draining).
	NodeDraining bool
	// DrainedNode is status.drainedNode: a drain suspended the session off that node.
	DrainedNode string
}

// Action is the step a reconcile takes.
type Action int

// Actions, decided by Decide.
const (
	// Wait: nothing to do until Decision.RequeueAfter or the next event.
	Wait Action = iota
	// CreatePod creates the next pod of the session (status.pods+1) and enters Decision.Phase.
	CreatePod
	// MarkRunning records the pod as serving (phase Running, activity now).
	MarkRunning
	// StartCheckpoint creates the Checkpoint AgentCheckpoint of the pod (phase Suspending).
	StartCheckpoint
	// FinishSuspend records the checkpoint, deletes the pod (phase Suspended).
	FinishSuspend
	// AbortSuspend: the checkpoint failed; the session keeps running (activity now, so an idle
	// suspension is tried again after another idleTimeout).
	AbortSuspend
	// StartRestore creates the Restore AgentCheckpoint into the new pod.
	StartRestore
	// AbortResume: the restore failed; the new pod is deleted and the session stays Suspended
	// until the next activity.
	AbortResume
)

// Decision is Decide's answer.
type Decision struct {
	Action Action
	// Phase is the phase after the action.
	Phase nnv1.AgentSessionPhase
	// ByRequest, for StartCheckpoint: spec.suspend (not idleness) asked for it.
	ByRequest bool
	// Drain, for StartCheckpoint: the pod's node is draining; the session resumes elsewhere as
	// soon as it is suspended.
	Drain bool
	// RequeueAfter, when positive, is when to look again without an event (the idle deadline).
	RequeueAfter time.Duration
	// Reason names the transition for events and conditions.
	Reason string
}

// wantsSuspend reports whether a running session should be suspended now, and if not, how long
// until its idle deadline (0: none).
func wantsSuspend(o Observed, now time.Time) (bool, bool, time.Duration) {
	if o.Suspend {
		return true, true, 0
	}
	if o.IdleTimeout <= 0 {
		return false, false, 0
	}
	left := o.LastActivity.Add(o.IdleTimeout).Sub(now)
	if left <= 0 {
		return true, false, 0
	}
	return false, false, left
}

// wantsResume reports whether a suspended session should resume: spec.suspend is false and
// either spec.suspend had suspended it, a node drain did (it resumes elsewhere at once), or
// activity came after the suspension.
func wantsResume(o Observed) bool {
	if o.Suspend {
		return false
	}
	return o.SuspendedByRequest || o.DrainedNode != "" || o.LastActivity.After(o.PhaseSince)
}

// Decide is the pure core of a reconcile.
func Decide(o Observed, now time.Time) Decision {
	switch o.Phase {
	case "", nnv1.SessionPending:
		if !o.PodExists {
			return Decision{Action: CreatePod, Phase: nnv1.SessionPending, Reason: "Creating"}
		}
		if o.PodReady {
			return Decision{Action: MarkRunning, Phase: nnv1.SessionRunning, Reason: "Started"}
		}
		return Decision{Action: Wait, Phase: nnv1.SessionPending}
	case nnv1.SessionRunning:
		if !o.PodExists {
			if o.PodTerminating && o.NodeDraining {
				// Evicted by a drain: checkpoint within the pod's grace period.
				if o.Suspend {
					return Decision{Action: StartCheckpoint, Phase: nnv1.SessionSuspending, ByRequest: true, Reason: "SuspendRequested"}
				}
				return Decision{Action: StartCheckpoint, Phase: nnv1.SessionSuspending, Drain: true, Reason: "NodeDraining"}
			}
			if o.HasCheckpoint {
				// The pod was lost: come back from the last checkpoint rather than empty.
				return Decision{Action: CreatePod, Phase: nnv1.SessionResuming, Reason: "PodLost"}
			}
			return Decision{Action: CreatePod, Phase: nnv1.SessionPending, Reason: "PodLost"}
		}
		suspend, byRequest, left := wantsSuspend(o, now)
		if byRequest {
			// spec.suspend wins over a drain: the session stays suspended where it asked to.
			return Decision{Action: StartCheckpoint, Phase: nnv1.SessionSuspending, ByRequest: true, Reason: "SuspendRequested"}
		}
		if o.NodeDraining {
			return Decision{Action: StartCheckpoint, Phase: nnv1.SessionSuspending, Drain: true, Reason: "NodeDraining"}
		}
		if suspend {
			return Decision{Action: StartCheckpoint, Phase: nnv1.SessionSuspending, Reason: "IdleTimeout"}
		}
		return Decision{Action: Wait, Phase: nnv1.SessionRunning, RequeueAfter: left}
	case nnv1.SessionSuspending:
		switch o.Checkpoint {
		case OpSucceeded:
			return Decision{Action: FinishSuspend, Phase: nnv1.SessionSuspended, Reason: "Checkpointed"}
		case OpFailed:
			return Decision{Action: AbortSuspend, Phase: nnv1.SessionRunning, Reason: "CheckpointFailed"}
		case OpNone:
			if !o.PodExists && !o.PodTerminating {
				return Decision{Action: AbortSuspend, Phase: nnv1.SessionRunning, Reason: "PodLost"}
			}
			return Decision{Action: StartCheckpoint, Phase: nnv1.SessionSuspending, ByRequest: o.Suspend, Reason: "CheckpointMissing"}
		}
		return Decision{Action: Wait, Phase: nnv1.SessionSuspending}
	case nnv1.SessionSuspended:
		if wantsResume(o) {
			reason := "Resuming"
			if o.DrainedNode != "" && !o.SuspendedByRequest {
				reason = "ResumingElsewhere"
			}
			return Decision{Action: CreatePod, Phase: nnv1.SessionResuming, Reason: reason}
		}
		return Decision{Action: Wait, Phase: nnv1.SessionSuspended}
	case nnv1.SessionResuming:
		switch {
		case !o.PodExists:
			return Decision{Action: CreatePod, Phase: nnv1.SessionResuming, Reason: "PodLost"}
		case o.Restore == OpSucceeded && o.PodReady:
			return Decision{Action: MarkRunning, Phase: nnv1.SessionRunning, Reason: "Resumed"}
		case o.Restore == OpFailed:
			return Decision{Action: AbortResume, Phase: nnv1.SessionSuspended, Reason: "RestoreFailed"}
		case o.Restore == OpNone:
			// The resume pod's first container is a host (pause) container; a readiness probe
			// on the agent's port turns Ready only once the restored process serves. The
			// Restore is created with the pod (the node agent fetches the checkpoint while the
			// pod starts and restores once the host runs); this recreates a missing one. The
			// session runs when the Restore Succeeded and the pod is Ready.
			return Decision{Action: StartRestore, Phase: nnv1.SessionResuming, Reason: "Restoring"}
		}
		return Decision{Action: Wait, Phase: nnv1.SessionResuming}
	}
	return Decision{Action: Wait, Phase: o.Phase}
}
