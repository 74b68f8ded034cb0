package seeddocs

import (
	"strings"
	"testing"
)

func TestExtract(t *testing.T) {
	doc := `Intro prose.

apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata:
  name: a
spec:
  # comment
  minReplicas: 1

  maxReplicas: 2

Next Section

metrics:
  - type: queue-depth
apiVersion: v1
kind: ConfigMap
metadata:
  name: b`
	got, err := Extract("x.txt", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("got %d examples, want 2: %v", len(got), got)
	}
	if got[0].Kind != "AgentPool" || got[0].Name != "a" || got[0].Line != 3 || !got[0].IsNeuroNetes() {
		t.Errorf("first: %+v", got[0])
	}
	if !strings.Contains(got[0].YAML, "maxReplicas: 2") || strings.Contains(got[0].YAML, "Next Section") {
		t.Errorf("first YAML wrong: %q", got[0].YAML)
	}
	if got[1].GroupKind() != "/ConfigMap" || got[1].IsNeuroNetes() {
		t.Errorf("second: %+v", got[1])
	}
}

func TestExtractRejectsBrokenYAML(t *testing.T) {
	if _, err := Extract("x", []byte("apiVersion: v1\nkind: [\n")); err == nil {
		t.Fatal("broken example accepted")
	}
}
