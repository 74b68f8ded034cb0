package agentsession

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// CheckpointName is the Checkpoint AgentCheckpoint that suspends the session's n-th pod.
func CheckpointName(session string, n int32) string { return fmt.Sprintf("%s-%d-suspend", session, n) }

// RestoreName is the Restore AgentCheckpoint into the session's n-th pod.
func RestoreName(session string, n int32) string { return fmt.Sprintf("%s-%d-resume", session, n) }

// agentKey is the store key of a session's checkpoints: the session's own name, so "latest" and
// retention never mix two sessions of one class.
func agentKey(s *nnv1.AgentSession) string { return "session." + s.Name }

// NewCheckpoint is the AgentCheckpoint that dumps the session container of pod (the first
// container) and stops it, carrying the files of its workspace emptyDir (bounded by its
// sizeLimit, the session's spec.workspaceSizeLimit); the two newest checkpoints of the session
// are kept.
func NewCheckpoint(s *nnv1.AgentSession, pod string, n int32) *nnv1.AgentCheckpoint {
	return &nnv1.AgentCheckpoint{
		ObjectMeta: metav1.ObjectMeta{
			Name: CheckpointName(s.Name, n), Namespace: s.Namespace,
			Labels: map[string]string{nnv1.SessionLabel: s.Name, nnv1.CheckpointAgentLabel: agentKey(s)},
		},
		Spec: nnv1.AgentCheckpointSpec{
			Operation: nnv1.CheckpointOperation, Agent: agentKey(s),
			Source:          &nnv1.ContainerRef{Pod: pod},
			WorkspaceVolume: WorkspaceVolume,
			Retention:       &nnv1.CheckpointRetention{KeepLast: 2},
		},
	}
}

// NewRestore is the AgentCheckpoint that restores status.lastCheckpoint into pod. The id must be
// a checkpoint of the session's namespace (nnv1.ValidateRestoreSource): a status written by
// anyone but the controller cannot point a restore at another tenant's checkpoint.
func NewRestore(s *nnv1.AgentSession, pod string, n int32) (*nnv1.AgentCheckpoint, error) {
	id := s.Status.LastCheckpoint
	if id == "" {
		return nil, fmt.Errorf("status.lastCheckpoint: empty: nothing to resume from")
	}
	if err := nnv1.ValidateRestoreSource("spec.agent", "status.lastCheckpoint", s.Namespace, agentKey(s), id); err != nil {
		return nil, err
	}
	return &nnv1.AgentCheckpoint{
		ObjectMeta: metav1.ObjectMeta{
			Name: RestoreName(s.Name, n), Namespace: s.Namespace,
			Labels: map[string]string{nnv1.SessionLabel: s.Name, nnv1.CheckpointAgentLabel: agentKey(s)},
		},
		Spec: nnv1.AgentCheckpointSpec{
			Operation: nnv1.RestoreOperation, Agent: agentKey(s), CheckpointID: id,
			Target: &nnv1.ContainerRef{Pod: pod},
		},
	}, nil
}

// OpOf maps an AgentCheckpoint (nil: absent) to its outcome.
func OpOf(ck *nnv1.AgentCheckpoint) Op {
	switch {
	case ck == nil:
		return OpNone
	case ck.Status.Phase == nnv1.AgentCheckpointSucceeded:
		return OpSucceeded
	case ck.Status.Phase == nnv1.AgentCheckpointFailed:
		return OpFailed
	}
	return OpRunning
}

// workspaceTooLarge is the reason the node agent gives a Checkpoint whose workspace is over its
// sizeLimit (nodeagent/snapshot.ReasonWorkspaceTooLarge; status.message starts with it).
const workspaceTooLarge = "WorkspaceTooLarge"

// SuspendFailure explains a failed suspension from its Checkpoint's status.message: a workspace
// over its limit names spec.workspaceSizeLimit. The session keeps running either way.
func SuspendFailure(ck *nnv1.AgentCheckpoint) string {
	msg := ck.Status.Message
	if msg == "" {
		msg = "no message"
	}
	if strings.HasPrefix(msg, workspaceTooLarge+":") {
		return fmt.Sprintf("spec.workspaceSizeLimit: the workspace holds more than the limit, so the session was not suspended and keeps running with its state (checkpoint %s: %s)", ck.Name, msg)
	}
	return fmt.Sprintf("suspension failed, the session keeps running with its state (checkpoint %s: %s)", ck.Name, msg)
}
