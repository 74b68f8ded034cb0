package v1alpha1

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// AgentPoolKind is the kind of AgentPool objects, as owner references name it.
const AgentPoolKind = "AgentPool"

// IsPoolRef reports whether r refers to an AgentPool of this API group (any version).
func IsPoolRef(r metav1.OwnerReference) bool {
	return r.Kind == AgentPoolKind && strings.HasPrefix(r.APIVersion, GroupVersion.Group+"/")
}

// PoolOwner returns the name and UID of the AgentPool that controls obj: its controller owner
// reference, when that refers to an AgentPool of this API group. ok is false otherwise. Every
// check of "controlled by an AgentPool" goes through it; a caller that knows the pool compares
// the UID as well, since a name alone is what any user who can write obj can claim.
func PoolOwner(obj metav1.Object) (name string, uid types.UID, ok bool) {
	r := metav1.GetControllerOf(obj)
	if r == nil || !IsPoolRef(*r) {
		return "", "", false
	}
	return r.Name, r.UID, true
}
