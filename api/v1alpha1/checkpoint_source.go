package v1alpha1

import (
	"fmt"
	"regexp"
	"strings"
)

// Restore-source rule, one place for every Go caller (the controller before it creates a
// Restore, the node agent before it restores; deploy/helm/neuronetes/files/admission holds the
// same rule as a ValidatingAdmissionPolicy for the apiserver): a restore reads only checkpoints
// of its own namespace. The image store is keyed by namespace, so an agent name always means
// the agent of the restoring namespace; a checkpoint id names its namespace as its first
// "."-separated part (CheckpointIDFor), and an id of another namespace is refused.

// checkpointNameRE is the store's name grammar (spec.agent's pattern, without "..").
var checkpointNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9._-]{0,252}$`)

// CheckpointIDFor is the store id of the checkpoint that the AgentCheckpoint name in namespace
// writes: "<namespace>.<name>". Namespaces hold no ".", so the id's namespace is unambiguous.
func CheckpointIDFor(namespace, name string) string { return namespace + "." + name }

// ValidateRestoreSource checks a restore's agent key and checkpoint id (either may be empty:
// an empty id means the agent's latest) against namespace, the namespace of the restore. The
// error names agentField or idField, the fields the values came from.
func ValidateRestoreSource(agentField, idField, namespace, agent, id string) error {
	if agent != "" && (!checkpointNameRE.MatchString(agent) || strings.Contains(agent, "..")) {
		return fmt.Errorf("%s: agent %q: want [a-zA-Z0-9][a-zA-Z0-9._-]* without \"..\"", agentField, agent)
	}
	field := idField
	if id == "" {
		return nil
	}
	if !checkpointNameRE.MatchString(id) || strings.Contains(id, "..") {
		return fmt.Errorf("%s: checkpoint id %q: want [a-zA-Z0-9][a-zA-Z0-9._-]* without \"..\"", field, id)
	}
	if ns, _, _ := strings.Cut(id, "."); ns != namespace || !strings.Contains(id, ".") {
		return fmt.Errorf("%s: checkpoint id %q is not a checkpoint of namespace %q (want %q): restores read only their own namespace's checkpoints",
			field, id, namespace, CheckpointIDFor(namespace, "<name>"))
	}
	return nil
}

// RestoreFromField names the restore-from annotation in errors.
const RestoreFromField = "metadata.annotations[" + RestoreFromAnnotation + "]"

// ParseRestoreFrom splits a RestoreFromAnnotation value ("<agent>" or "<agent>/<id>") of a pod
// in namespace and checks it with ValidateRestoreSource.
func ParseRestoreFrom(namespace, v string) (agent, id string, err error) {
	agent, id, slash := strings.Cut(v, "/")
	if agent == "" || slash && id == "" {
		return "", "", fmt.Errorf("%s: %q: want <agent> or <agent>/<checkpoint id>", RestoreFromField, v)
	}
	if strings.Contains(id, "/") {
		return "", "", fmt.Errorf("%s: %q: want <agent> or <agent>/<checkpoint id> (the namespace is always the pod's own)", RestoreFromField, v)
	}
	if err := ValidateRestoreSource(RestoreFromField, RestoreFromField, namespace, agent, id); err != nil {
		return "", "", err
	}
	return agent, id, nil
}
