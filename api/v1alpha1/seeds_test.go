package v1alpha1

import (
	"path/filepath"
	"testing"

	"github.com/neuronetes/neuronetes/internal/seeddocs"
)

// TestCRDAcceptsSeedDocuments validates every NeuroNetes object example of the seed documents
// (../shared/seeds, read verbatim, never copied) against its generated CRD: a field removed from
// the API, or a value the schema refuses, fails it.
func TestCRDAcceptsSeedDocuments(t *testing.T) {
	dir, err := seeddocs.Dir(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	examples, err := seeddocs.All(dir)
	if err != nil {
		t.Fatal(err)
	}
	crds := map[string]string{
		"AgentPool":   "neuronetes.io_agentpools.yaml",
		"AgentClass":  "neuronetes.io_agentclasses.yaml",
		"ToolBinding": "neuronetes.io_toolbindings.yaml",
		"Model":       "neuronetes.io_models.yaml",
	}
	validators := map[string]*crdValidator{}
	checked := 0
	for _, ex := range examples {
		t.Run(ex.String(), func(t *testing.T) {
			if !ex.IsNeuroNetes() {
				if _, ok := seeddocs.SkippedKinds[ex.GroupKind()]; !ok {
					t.Fatalf("example of %s is neither NeuroNetes' nor in seeddocs.SkippedKinds", ex.GroupKind())
				}
				t.Skipf("not a NeuroNetes kind: %s", seeddocs.SkippedKinds[ex.GroupKind()])
			}
			file, ok := crds[ex.Kind]
			if !ok {
				t.Fatalf("no CRD for kind %s", ex.Kind)
			}
			if validators[ex.Kind] == nil {
				validators[ex.Kind] = loadCRD(t, file)
			}
			obj := map[string]any{}
			decodeLikeAPIServer(t, []byte(ex.YAML), &obj)
			if errs := validators[ex.Kind].validate(obj); len(errs) > 0 {
				t.Fatalf("rejected: %v\n%s", errs.ToAggregate(), ex.YAML)
			}
			checked++
		})
	}
	// Seed 001 holds 9 full objects today; fewer means the extractor lost some.
	if checked < 9 {
		t.Fatalf("only %d seed examples checked, want >= 9", checked)
	}
}
