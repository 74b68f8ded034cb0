package scoring

import (
	corev1 "k8s.io/api/core/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// CheckpointShare is the part of the model-cache score that CheckpointScore gives to the node
// holding the pod's checkpoint; the warm-weights score keeps the rest.
const CheckpointShare int64 = MaxScore / 4

// CheckpointRef returns the agent key and checkpoint id (empty for the agent's latest) that the
// pod restores from (nnv1.RestoreFromAnnotation, set by the AgentPool controller on warm pods and
// on replacements of interrupted pods); ok is false when the pod restores from none or the value
// is invalid (nnv1.ParseRestoreFrom).
func CheckpointRef(pod *corev1.Pod) (agent, id string, ok bool) {
	v := pod.Annotations[nnv1.RestoreFromAnnotation]
	if v == "" {
		return "", "", false
	}
	agent, id, err := nnv1.ParseRestoreFrom(pod.Namespace, v)
	return agent, id, err == nil
}

// checkpointAgent is an AgentCheckpoint's agent key: spec.agent, else the controller's
// nnv1.CheckpointAgentLabel (spec.agent defaults on the node agent from the source pod).
func checkpointAgent(ac *nnv1.AgentCheckpoint) string {
	if ac.Spec.Agent != "" {
		return ac.Spec.Agent
	}
	return ac.Labels[nnv1.CheckpointAgentLabel]
}

// CheckpointNode returns the node whose agent dumped the checkpoint that the pod restores from
// (status.nodeName of a Succeeded Checkpoint AgentCheckpoint of the pod's namespace and agent
// key): the one whose status.checkpointID is the pod's id, or for the agent's latest the one that
// completed last. "" when the pod restores from none or no such AgentCheckpoint names a node.
// The node agent's local checkpoint cache keeps that node's dump there (docs/checkpoint.md).
func CheckpointNode(pod *corev1.Pod, checkpoints []nnv1.AgentCheckpoint) string {
	agent, id, ok := CheckpointRef(pod)
	if !ok {
		return ""
	}
	var best *nnv1.AgentCheckpoint
	for i := range checkpoints {
		ac := &checkpoints[i]
		if ac.Namespace != pod.Namespace || ac.Spec.Operation != nnv1.CheckpointOperation ||
			ac.Status.Phase != nnv1.AgentCheckpointSucceeded || ac.Status.NodeName == "" ||
			checkpointAgent(ac) != agent || ac.DeletionTimestamp != nil {
			continue
		}
		if id != "" {
			if ac.Status.CheckpointID == id {
				return ac.Status.NodeName
			}
			continue
		}
		if best == nil || completedAfter(ac, best) {
			best = ac
		}
	}
	if best == nil {
		return ""
	}
	return best.Status.NodeName
}

// completedAfter reports whether a completed after b (a missing completion time is oldest; ties
// go to the later id, so the choice does not depend on list order).
func completedAfter(a, b *nnv1.AgentCheckpoint) bool {
	ta, tb := a.Status.CompletionTime, b.Status.CompletionTime
	switch {
	case ta == nil && tb == nil:
		return a.Status.CheckpointID > b.Status.CheckpointID
	case ta == nil || tb == nil:
		return tb == nil
	case ta.Equal(tb):
		return a.Status.CheckpointID > b.Status.CheckpointID
	}
	return tb.Before(ta)
}

// CheckpointScore folds checkpoint presence into a node's model-cache score cache (CacheScore):
// when the pod's checkpoint node is known (known), every node keeps three quarters of cache and
// the checkpoint's node (here) gets CheckpointShare on top, so a warm node with the checkpoint
// scores MaxScore, a warm node without it 75, a node warm for no model with it 62 and without
// it 37. When it is not known the score is cache unchanged.
func CheckpointScore(cache int64, known, here bool) int64 {
	if !known {
		return cache
	}
	s := cache * (MaxScore - CheckpointShare) / MaxScore
	if here {
		s += CheckpointShare
	}
	return s
}
