package v1alpha1

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/listtype"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// crdValidator validates objects the way the apiserver validates a custom resource: OpenAPI
// schema, list-map uniqueness and CEL rules of the generated CRD.
type crdValidator struct {
	schema     validation.SchemaValidator
	structural *structuralschema.Structural
	cel        *cel.Validator
}

func loadCRD(t *testing.T, file string) *crdValidator {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "crds", file))
	if err != nil {
		t.Fatalf("read CRD (run controller-gen): %v", err)
	}
	var crd apiextv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(b, &crd); err != nil {
		t.Fatal(err)
	}
	var internal apiextensions.JSONSchemaProps
	if err := apiextv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(crd.Spec.Versions[0].Schema.OpenAPIV3Schema, &internal, nil); err != nil {
		t.Fatal(err)
	}
	sv, _, err := validation.NewSchemaValidator(&internal)
	if err != nil {
		t.Fatal(err)
	}
	st, err := structuralschema.NewStructural(&internal)
	if err != nil {
		t.Fatal(err)
	}
	return &crdValidator{schema: sv, structural: st, cel: cel.NewValidator(st, true, celconfig.PerCallLimit)}
}

func (v *crdValidator) validate(obj map[string]any) field.ErrorList {
	errs := validation.ValidateCustomResource(nil, obj, v.schema)
	errs = append(errs, listtype.ValidateListSetsAndMaps(nil, v.structural, obj)...)
	celErrs, _ := v.cel.Validate(context.Background(), nil, v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	return append(errs, celErrs...)
}

// TestCRDAcceptsSeedExamples validates every seed 001 fixture against its generated CRD.
func TestCRDAcceptsSeedExamples(t *testing.T) {
	validators := map[string]*crdValidator{
		"AgentPool":   loadCRD(t, "neuronetes.io_agentpools.yaml"),
		"AgentClass":  loadCRD(t, "neuronetes.io_agentclasses.yaml"),
		"ToolBinding": loadCRD(t, "neuronetes.io_toolbindings.yaml"),
	}
	files, err := filepath.Glob("testdata/seed001/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("seed 001 fixtures: %d files (%v): a test of no fixture proves nothing", len(files), err)
	}
	seen := map[string]bool{}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			obj := map[string]any{}
			decodeLikeAPIServer(t, b, &obj)
			kind, _ := obj["kind"].(string)
			v := validators[kind]
			if v == nil {
				t.Fatalf("no CRD for kind %v", obj["kind"])
			}
			seen[kind] = true
			if errs := v.validate(obj); len(errs) > 0 {
				t.Fatalf("rejected: %v", errs.ToAggregate())
			}
		})
	}
	for kind := range validators {
		if !seen[kind] {
			t.Errorf("no seed 001 fixture of kind %s", kind)
		}
	}
}

// decodeLikeAPIServer decodes YAML with integers as int64, as the apiserver does (plain YAML
// decoding yields float64, which CEL rules over integer fields reject).
func decodeLikeAPIServer(t *testing.T, b []byte, into any) {
	t.Helper()
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := utiljson.Unmarshal(j, into); err != nil {
		t.Fatal(err)
	}
}

// TestCRDRejectsMalformedObjects checks each malformed fixture fails with an error naming its field.
func TestCRDRejectsMalformedObjects(t *testing.T) {
	for _, tc := range []struct {
		kind, crd, fixture string
		minCases           int
	}{
		{"AgentPool", "neuronetes.io_agentpools.yaml", "testdata/invalid-agentpools.yaml", 15},
		{"ToolBinding", "neuronetes.io_toolbindings.yaml", "testdata/invalid-toolbindings.yaml", 3},
		{"AgentSession", "neuronetes.io_agentsessions.yaml", "testdata/invalid-agentsessions.yaml", 5},
		{"AgentClass", "neuronetes.io_agentclasses.yaml", "testdata/invalid-agentclasses.yaml", 5},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			v := loadCRD(t, tc.crd)
			b, err := os.ReadFile(tc.fixture)
			if err != nil {
				t.Fatal(err)
			}
			var cases []any
			decodeLikeAPIServer(t, b, &cases)
			if len(cases) < tc.minCases {
				t.Fatalf("only %d malformed cases in %s, want >= %d", len(cases), tc.fixture, tc.minCases)
			}
			for _, raw := range cases {
				c := raw.(map[string]any)
				name, fieldName, spec := c["name"].(string), c["field"].(string), c["spec"]
				t.Run(name, func(t *testing.T) {
					obj := map[string]any{
						"apiVersion": "neuronetes.io/v1alpha1", "kind": tc.kind,
						"metadata": map[string]any{"name": "bad", "namespace": "ns"}, "spec": spec,
					}
					errs := v.validate(obj)
					if len(errs) == 0 {
						t.Fatalf("accepted: %v", spec)
					}
					msg := errs.ToAggregate().Error()
					if !strings.Contains(msg, fieldName) {
						t.Fatalf("errors do not name %s: %s", fieldName, msg)
					}
					t.Logf("%s", msg)
				})
			}
		})
	}
}

// TestCRDAcceptsGPUAlignment checks the alignment rules reject only what they name: whole GPUs of
// the driver with either domain, and NUMA alignment through another DeviceClass, are admitted.
func TestCRDAcceptsGPUAlignment(t *testing.T) {
	v := loadCRD(t, "neuronetes.io_agentclasses.yaml")
	for _, gpu := range []map[string]any{
		{"count": int64(4), "alignment": "NUMANode"},
		{"count": int64(8), "alignment": "NVLinkDomain"},
		{"alignment": "NVLinkDomain"},
		{"count": int64(2), "deviceClassName": "gpu.nvidia.com", "alignment": "NUMANode"},
	} {
		obj := map[string]any{
			"apiVersion": "neuronetes.io/v1alpha1", "kind": "AgentClass",
			"metadata": map[string]any{"name": "ok", "namespace": "ns"}, "spec": map[string]any{"gpu": gpu},
		}
		if errs := v.validate(obj); len(errs) != 0 {
			t.Errorf("spec.gpu %v rejected: %v", gpu, errs.ToAggregate())
		}
	}
}
