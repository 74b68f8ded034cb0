// Package v1alpha1 holds the NeuroNetes API types of group neuronetes.io, version v1alpha1:
// Model, AgentClass, AgentPool and ToolBinding, plus the label contract shared by the
// controller and the node agent.
//
// +kubebuilder:object:generate=true
// +groupName=neuronetes.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every type in this package.
	GroupVersion = schema.GroupVersion{Group: "neuronetes.io", Version: "v1alpha1"}

	// SchemeBuilder registers the types of this package with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this package to a runtime.Scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
