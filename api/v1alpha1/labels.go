package v1alpha1

import "strings"

// Label and annotation contract shared by the controller, the node agent and the webhook.
const (
	// WarmLabelPrefix prefixes the node label that the node agent sets, with value "true", on a node
	// where a model's weights are cached and verified. See WarmNodeLabel.
	WarmLabelPrefix = "warm.neuronetes.io/"

	// ManagedByLabel, with value ManagedByController, marks the objects the controller keeps in
	// tenant namespaces (the sidecar Redis Secrets, the agent NetworkPolicies). The controller
	// rewrites or deletes no object of those names without it, and its admission policy admits
	// only labelled Secrets.
	ManagedByLabel = "neuronetes.io/managed-by"
	// ManagedByController is ManagedByLabel's value on the controller's objects.
	ManagedByController = "neuronetes-controller"

	// PoolLabel names the AgentPool that owns a pod.
	PoolLabel = "neuronetes.io/pool"
	// StateLabel carries a pool pod's warm-pool state: one of PodStateWarm, PodStateServing,
	// PodStateDraining. The pool's Service selects only PodStateServing.
	StateLabel = "neuronetes.io/state"
	// AgentClassLabel names the AgentClass a pod was created from; the webhook injects the sidecar
	// into pods that carry it.
	AgentClassLabel = "neuronetes.io/agentclass"
	// InjectSidecarLabel set to "true" opts any pod into sidecar injection.
	InjectSidecarLabel = "neuronetes.io/inject-sidecar"
	// SidecarInjectedAnnotation is set by the webhook on pods it mutated; its presence makes
	// injection idempotent.
	SidecarInjectedAnnotation = "neuronetes.io/sidecar-injected"

	// CapacityLabel on a pool pod says where spotStrategy lets it run: CapacitySpot (it tolerates
	// and prefers spot nodes) or CapacityOnDemand (it requires a node that is not spot).
	CapacityLabel = "neuronetes.io/capacity"
	// CapacitySpot is CapacityLabel's value for spot-eligible pods.
	CapacitySpot = "spot"
	// CapacityOnDemand is CapacityLabel's value for pods kept off spot nodes.
	CapacityOnDemand = "on-demand"

	// PodStateWarm marks a started, Ready pod that does not receive traffic.
	PodStateWarm = "warm"
	// PodStateServing marks a pod selected by the pool's Service.
	PodStateServing = "serving"
	// PodStateDraining marks a pod leaving the pool; it finishes its streams, then terminates.
	PodStateDraining = "draining"
)

// digestHexLen is how many hex characters of a digest fit in a label name: the name part of a
// label key is at most 63 characters, and "sha256-" takes 7 of them.
const digestHexLen = 56

// WarmNodeLabel returns the node label key that marks a node as warm for the model with the
// given digest ("sha256:<hex>"): WarmLabelPrefix + "sha256-" + the first 56 hex characters.
// A digest without the "sha256:" prefix is taken as bare hex. Hex is lower-cased.
func WarmNodeLabel(digest string) string {
	hex := strings.ToLower(strings.TrimPrefix(digest, "sha256:"))
	if len(hex) > digestHexLen {
		hex = hex[:digestHexLen]
	}
	return WarmLabelPrefix + "sha256-" + hex
}
