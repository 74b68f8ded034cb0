package agentpool

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/neuronetes/neuronetes/controller/tooltoken"
)

// addToolToken mounts the tool proxy's projected token in every container of the pod
// (tooltoken.Add).
func addToolToken(pod *corev1.Pod) { tooltoken.Add(pod) }
