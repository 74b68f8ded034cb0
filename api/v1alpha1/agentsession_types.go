package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AgentSessionPhase is where a session is in its lifecycle (docs/sessions.md).
// +kubebuilder:validation:Enum=Pending;Running;Suspending;Suspended;Resuming
type AgentSessionPhase string

// AgentSession phases.
const (
	// SessionPending: the session's pod is being created or started.
	SessionPending AgentSessionPhase = "Pending"
	// SessionRunning: the pod runs and serves the session.
	SessionRunning AgentSessionPhase = "Running"
	// SessionSuspending: a Checkpoint AgentCheckpoint of the session container is under way.
	SessionSuspending AgentSessionPhase = "Suspending"
	// SessionSuspended: the checkpoint is stored (status.lastCheckpoint) and the pod is gone.
	SessionSuspended AgentSessionPhase = "Suspended"
	// SessionResuming: a new pod is started and the last checkpoint is restored into it.
	SessionResuming AgentSessionPhase = "Resuming"
)

// SessionLastActivityAnnotation on an AgentSession carries the time (RFC 3339) of the session's
// last request. Whoever serves the session writes it; the idle timeout counts from it, and a
// time later than the suspension asks a Suspended session to resume.
const SessionLastActivityAnnotation = "session.neuronetes.io/last-activity"

// SessionLabel on a session's pod and AgentCheckpoints names its AgentSession.
const SessionLabel = "neuronetes.io/session"

// AgentSessionSpec is one long-lived agent session.
type AgentSessionSpec struct {
	// ClassRef names the AgentClass whose template runs the session. Immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec.classRef is immutable"
	ClassRef LocalObjectReference `json:"classRef"`

	// IdleTimeout suspends the session after this long without activity
	// (annotation session.neuronetes.io/last-activity); empty: never on idleness.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="spec.idleTimeout must be at least 1s"
	// +optional
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`

	// Suspend, when true, checkpoints the session and stops its pod; setting it back to false
	// resumes it.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// WorkspaceSizeLimit bounds the session's emptyDir workspace.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="spec.workspaceSizeLimit must be positive"
	// +optional
	WorkspaceSizeLimit *resource.Quantity `json:"workspaceSizeLimit,omitempty"`

	// RuntimeClassName overrides the class template's RuntimeClass; the AgentClass must list it
	// in spec.allowedRuntimeClassNames.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +optional
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`
}

// AgentSessionStatus reports where the session is.
type AgentSessionStatus struct {
	// Phase is Pending, Running, Suspending, Suspended or Resuming.
	// +optional
	Phase AgentSessionPhase `json:"phase,omitempty"`
	// Conditions of the session.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// NodeName is the node of the session's pod.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// PodName is the session's current pod.
	// +optional
	PodName string `json:"podName,omitempty"`
	// Pods counts the pods created for (or claimed by) the session; the next pod is named
	// <session>-<pods+1>.
	// +optional
	Pods int32 `json:"pods,omitempty"`
	// ServiceAccountName is the ServiceAccount the session's pods run as now, which the session
	// owns: session-<name>, created with its first pod, or the one created with the warm pod or
	// warm restore host the session last claimed. Empty before the session's first pod (and on
	// sessions whose status predates the field being set for session-<name>).
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// RetiredServiceAccountNames are the session's ServiceAccounts it no longer runs as: the one
	// it ran as before a claim moved it to another (serviceAccountName). The controller deletes
	// each once none of the session's pods runs as it, and then drops it from this list.
	// +listType=set
	// +optional
	RetiredServiceAccountNames []string `json:"retiredServiceAccountNames,omitempty"`
	// LastActivity is the last activity the controller saw.
	// +optional
	LastActivity *metav1.Time `json:"lastActivity,omitempty"`
	// LastCheckpoint is the id of the stored checkpoint the session resumes from.
	// +optional
	LastCheckpoint string `json:"lastCheckpoint,omitempty"`
	// LastCheckpointTime is when that checkpoint was stored.
	// +optional
	LastCheckpointTime *metav1.Time `json:"lastCheckpointTime,omitempty"`
	// SuspendedByRequest is true when spec.suspend (not idleness) suspended the session.
	// +optional
	SuspendedByRequest bool `json:"suspendedByRequest,omitempty"`
	// TransitionTime is when the current phase began.
	// +optional
	TransitionTime *metav1.Time `json:"transitionTime,omitempty"`
	// DrainedNode is the node the session was suspended off because it was draining (cordoned
	// or tainted with an interruption taint), from that suspension until the session runs
	// again: the session resumes at once, and its new pod avoids this node.
	// +optional
	DrainedNode string `json:"drainedNode,omitempty"`
}

// AgentSession is one agent session that may sleep (checkpointed, no pod) and wake with its
// memory intact.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=neuronetes,shortName=asess
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 50",message="metadata.name must be at most 50 characters (it names the session's pods and labels)"
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Idle",type=date,JSONPath=`.status.lastActivity`
// +kubebuilder:printcolumn:name="Checkpoint",type=date,JSONPath=`.status.lastCheckpointTime`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentSession struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the session.
	Spec AgentSessionSpec `json:"spec"`
	// Status reports where it is.
	// +optional
	Status AgentSessionStatus `json:"status,omitempty"`
}

// AgentSessionList is a list of AgentSessions.
//
// +kubebuilder:object:root=true
type AgentSessionList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the AgentSessions.
	Items []AgentSession `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AgentSession{}, &AgentSessionList{})
}
