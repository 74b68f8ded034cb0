package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AgentCheckpointOperation says what an AgentCheckpoint asks the node agent to do.
// +kubebuilder:validation:Enum=Checkpoint;Restore
type AgentCheckpointOperation string

// AgentCheckpoint operations.
const (
	// CheckpointOperation dumps a running container with CRIU and stores the images.
	CheckpointOperation AgentCheckpointOperation = "Checkpoint"
	// RestoreOperation restores a stored checkpoint into a target container.
	RestoreOperation AgentCheckpointOperation = "Restore"
)

// Warm-pool restore contract between the controller and the node agent.
const (
	// RestoreFromAnnotation, set by the controller on a warm pod it creates for an AgentClass,
	// names the checkpoint agent key to restore from ("<agent>" for the latest checkpoint, or
	// "<agent>/<id>" with an id of the pod's own namespace, "<namespace>.<name>"; see
	// ParseRestoreFrom: the agent is always looked up in the pod's namespace, and a value
	// naming another namespace's checkpoint is refused). The controller then creates an AgentCheckpoint with operation Restore that
	// targets the pod once it is Running; the pod must not be marked warm-ready before that
	// AgentCheckpoint Succeeded (on failure the pod is cold-started as usual).
	RestoreFromAnnotation = "checkpoint.neuronetes.io/restore-from"
	// CheckpointAgentLabel on an AgentCheckpoint carries its agent key, so the controller can list
	// an AgentClass's checkpoints.
	CheckpointAgentLabel = "checkpoint.neuronetes.io/agent"
)

// ContainerRef names a container of a pod in the AgentCheckpoint's namespace.
type ContainerRef struct {
	// Pod is the pod name.
	// +kubebuilder:validation:MinLength=1
	Pod string `json:"pod"`
	// Container is the container name; empty means the pod's first container.
	// +optional
	Container string `json:"container,omitempty"`
}

// CheckpointRetention bounds how many checkpoints of an agent key are kept in the store.
type CheckpointRetention struct {
	// KeepLast keeps the newest N checkpoints of the agent key; 0 disables the rule.
	// +kubebuilder:validation:Minimum=0
	// +optional
	KeepLast int32 `json:"keepLast,omitempty"`
	// MaxAge deletes checkpoints older than this; the newest is always kept.
	// +optional
	MaxAge *metav1.Duration `json:"maxAge,omitempty"`
}

// AgentCheckpointSpec is a request to the node agent of one node.
type AgentCheckpointSpec struct {
	// Operation is Checkpoint or Restore.
	Operation AgentCheckpointOperation `json:"operation"`
	// Agent is the store key that groups checkpoints for retention and "latest" within this
	// AgentCheckpoint's namespace (normally the AgentClass name; the same name in another
	// namespace is another key). Defaults to the source pod's neuronetes.io/agentclass label,
	// else the pod name.
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9][a-zA-Z0-9._-]*$`
	// +optional
	Agent string `json:"agent,omitempty"`
	// Source is the container to checkpoint (operation Checkpoint).
	// +optional
	Source *ContainerRef `json:"source,omitempty"`
	// LeaveRunning keeps the source running after the dump (default false: it stops, as after a
	// spot-interruption checkpoint).
	// +optional
	LeaveRunning bool `json:"leaveRunning,omitempty"`
	// WorkspaceVolume (operation Checkpoint) names an emptyDir volume of the source pod, mounted
	// by the source container, whose files the checkpoint carries next to the CRIU images (an
	// AgentSession's "workspace"). The volume must set a sizeLimit: files over it fail the
	// checkpoint before the dump, and the container keeps running. A Restore of such a
	// checkpoint writes the files into the target container's mount of the same path before the
	// process is restored.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	WorkspaceVolume string `json:"workspaceVolume,omitempty"`
	// Target is the container to restore into (operation Restore): its task is replaced by the
	// restored process tree.
	// +optional
	Target *ContainerRef `json:"target,omitempty"`
	// CheckpointID selects the checkpoint to restore; empty means the agent's latest (the one
	// the store wrote last). It must be a checkpoint of this namespace: the ids the node agent
	// writes are "<namespace>.<name of the Checkpoint AgentCheckpoint>", and an id naming
	// another namespace is refused by admission and by the node agent.
	// +optional
	CheckpointID string `json:"checkpointID,omitempty"`
	// Retention is applied to the agent key after a successful checkpoint.
	// +optional
	Retention *CheckpointRetention `json:"retention,omitempty"`
}

// AgentCheckpointPhase is where a request is.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type AgentCheckpointPhase string

// AgentCheckpoint phases.
const (
	AgentCheckpointPending   AgentCheckpointPhase = "Pending"
	AgentCheckpointRunning   AgentCheckpointPhase = "Running"
	AgentCheckpointSucceeded AgentCheckpointPhase = "Succeeded"
	AgentCheckpointFailed    AgentCheckpointPhase = "Failed"
)

// AgentCheckpointStatus reports progress and the result.
type AgentCheckpointStatus struct {
	// Phase is Pending, Running, Succeeded or Failed; Succeeded and Failed are final.
	// +optional
	Phase AgentCheckpointPhase `json:"phase,omitempty"`
	// NodeName is the node whose agent handled the request (the source or target pod's node).
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// CheckpointID is the stored checkpoint (written or restored).
	// +optional
	CheckpointID string `json:"checkpointID,omitempty"`
	// Progress is the percentage of bytes moved in the current step.
	// +optional
	Progress int32 `json:"progress,omitempty"`
	// TotalBytes is the size of the checkpoint images.
	// +optional
	TotalBytes int64 `json:"totalBytes,omitempty"`
	// NewBytes is how many bytes this checkpoint added to the store after dedup.
	// +optional
	NewBytes int64 `json:"newBytes,omitempty"`
	// Message explains the phase, in particular a failure.
	// +optional
	Message string `json:"message,omitempty"`
	// StartTime is when the node agent started the request.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when it succeeded or failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// AgentCheckpoint asks the node agent that runs the named pod to checkpoint one of its containers
// into the image store, or to restore a stored checkpoint into a container.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=neuronetes,shortName=ackpt
// +kubebuilder:printcolumn:name="Operation",type=string,JSONPath=`.spec.operation`
// +kubebuilder:printcolumn:name="Agent",type=string,JSONPath=`.spec.agent`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Checkpoint",type=string,JSONPath=`.status.checkpointID`
// +kubebuilder:printcolumn:name="Progress",type=integer,JSONPath=`.status.progress`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentCheckpoint struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the request.
	Spec AgentCheckpointSpec `json:"spec"`
	// Status reports progress and the result.
	// +optional
	Status AgentCheckpointStatus `json:"status,omitempty"`
}

// AgentCheckpointList is a list of AgentCheckpoints.
//
// +kubebuilder:object:root=true
type AgentCheckpointList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the AgentCheckpoints.
	Items []AgentCheckpoint `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AgentCheckpoint{}, &AgentCheckpointList{})
}
