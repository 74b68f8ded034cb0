package v1alpha1

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestPoolOwner(t *testing.T) {
	yes, no := true, false
	ref := func(apiVersion, kind string, controller *bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: apiVersion, Kind: kind, Name: "chat", UID: "u1", Controller: controller}
	}
	for _, tc := range []struct {
		name string
		refs []metav1.OwnerReference
		ok   bool
	}{
		{"controlling AgentPool", []metav1.OwnerReference{ref("neuronetes.io/v1alpha1", "AgentPool", &yes)}, true},
		{"another version of the group", []metav1.OwnerReference{ref("neuronetes.io/v1", "AgentPool", &yes)}, true},
		{"another group", []metav1.OwnerReference{ref("evil.io/v1", "AgentPool", &yes)}, false},
		{"a group that only starts alike", []metav1.OwnerReference{ref("neuronetes.io.evil/v1", "AgentPool", &yes)}, false},
		{"another kind", []metav1.OwnerReference{ref("neuronetes.io/v1alpha1", "AgentClass", &yes)}, false},
		{"not the controller", []metav1.OwnerReference{ref("neuronetes.io/v1alpha1", "AgentPool", &no)}, false},
		{"controller unset", []metav1.OwnerReference{ref("neuronetes.io/v1alpha1", "AgentPool", nil)}, false},
		{"no owner", nil, false},
		{"the controller is another kind", []metav1.OwnerReference{
			ref("neuronetes.io/v1alpha1", "AgentPool", &no), ref("neuronetes.io/v1alpha1", "AgentClass", &yes)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &AgentSession{ObjectMeta: metav1.ObjectMeta{OwnerReferences: tc.refs}}
			name, uid, ok := PoolOwner(s)
			if ok != tc.ok {
				t.Fatalf("ok %v, want %v", ok, tc.ok)
			}
			if want := (tc.ok && name == "chat" && uid == types.UID("u1")) || (!tc.ok && name == "" && uid == ""); !want {
				t.Fatalf("PoolOwner = %q, %q", name, uid)
			}
		})
	}
}
