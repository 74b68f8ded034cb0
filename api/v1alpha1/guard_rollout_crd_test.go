package v1alpha1

import (
	"os"
	"strings"
	"testing"
)

// TestGuardAndRolloutCRDsRejectMalformed checks each malformed GuardrailPolicy and AgentRollout
// fixture fails with an error naming its field.
func TestGuardAndRolloutCRDsRejectMalformed(t *testing.T) {
	for _, tc := range []struct{ kind, crd, fixture string }{
		{"GuardrailPolicy", "neuronetes.io_guardrailpolicies.yaml", "testdata/invalid-guardrailpolicies.yaml"},
		{"AgentRollout", "neuronetes.io_agentrollouts.yaml", "testdata/invalid-agentrollouts.yaml"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			v := loadCRD(t, tc.crd)
			b, err := os.ReadFile(tc.fixture)
			if err != nil {
				t.Fatal(err)
			}
			var cases []any
			decodeLikeAPIServer(t, b, &cases)
			for _, raw := range cases {
				c := raw.(map[string]any)
				t.Run(c["name"].(string), func(t *testing.T) {
					obj := map[string]any{"apiVersion": "neuronetes.io/v1alpha1", "kind": tc.kind,
						"metadata": map[string]any{"name": "bad", "namespace": "ns"}, "spec": c["spec"]}
					errs := v.validate(obj)
					if len(errs) == 0 {
						t.Fatalf("accepted: %v", c["spec"])
					}
					if msg := errs.ToAggregate().Error(); !strings.Contains(msg, c["field"].(string)) {
						t.Fatalf("errors do not name %s: %s", c["field"], msg)
					}
				})
			}
		})
	}
}

// TestGuardAndRolloutCRDsAcceptExamples validates the worked examples of docs/guardrails.md and
// docs/rollouts.md.
func TestGuardAndRolloutCRDsAcceptExamples(t *testing.T) {
	validators := map[string]*crdValidator{
		"GuardrailPolicy": loadCRD(t, "neuronetes.io_guardrailpolicies.yaml"),
		"AgentRollout":    loadCRD(t, "neuronetes.io_agentrollouts.yaml"),
	}
	for _, f := range []string{"../../deploy/examples/guardrails/guardrailpolicy.yaml", "../../deploy/examples/rollout/agentrollout.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range strings.Split(string(b), "\n---\n") {
			obj := map[string]any{}
			decodeLikeAPIServer(t, []byte(doc), &obj)
			v := validators[obj["kind"].(string)]
			if v == nil {
				continue
			}
			if errs := v.validate(obj); len(errs) > 0 {
				t.Fatalf("%s document %d rejected: %v", f, i, errs.ToAggregate())
			}
		}
	}
}
