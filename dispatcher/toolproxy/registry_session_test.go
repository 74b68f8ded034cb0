package toolproxy

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// TestBuildSessionCallers: a binding whose only callers are session classes is served; one with
// neither pools nor session classes is refused as NoCallers; Caller.Allowed reads pools for pool
// pods and classes for session pods, never one for the other.
func TestBuildSessionCallers(t *testing.T) {
	b := &v1alpha1.ToolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "search"},
		Spec: v1alpha1.ToolBindingSpec{Type: "http", Endpoint: "http://tool.example/", Tool: &v1alpha1.ToolConfig{AllowedSessionClasses: []string{"chat"}}}}
	tool, err := Build(b)
	if err != nil {
		t.Fatalf("session-class-only binding refused: %v", err)
	}
	for _, tc := range []struct {
		c    Caller
		want bool
	}{
		{Caller{Namespace: "ns", Session: "s1", SessionClass: "chat"}, true},
		{Caller{Namespace: "ns", Session: "s1", SessionClass: "billing"}, false},
		{Caller{Namespace: "ns", Pool: "chat"}, false}, // a pool named like the class
	} {
		if got := tc.c.Allowed(tool); got != tc.want {
			t.Errorf("%+v allowed %v, want %v", tc.c, got, tc.want)
		}
	}
	if p := (Caller{Session: "s1"}).Principal(); p != "session:s1" {
		t.Errorf("principal %q", p)
	}
	b.Spec.Tool.AllowedSessionClasses = nil
	if _, err := Build(b); err == nil {
		t.Fatal("a binding without callers was built")
	}
}
