package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/dispatcher/binding"
	"github.com/neuronetes/neuronetes/dispatcher/toolproxy"
)

// TestExamples resolves every ToolBinding of deploy/examples/toolbindings as the dispatcher
// would: queue bindings against the example pool and class, tools through the tool registry.
// (The API's own validation of the files runs in TestDispatcherToolProxy, a server-side dry run.)
func TestExamples(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "deploy", "examples", "toolbindings", "*.yaml"))
	if err != nil || len(files) < 6 {
		t.Fatalf("examples: %v %v", files, err)
	}
	var pool *v1alpha1.AgentPool
	var class *v1alpha1.AgentClass
	var bindings []v1alpha1.ToolBinding
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
		for {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			b, _ := sigsyaml.Marshal(doc)
			switch doc["kind"] {
			case "AgentPool":
				pool = &v1alpha1.AgentPool{}
				if err := sigsyaml.UnmarshalStrict(b, pool); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
			case "AgentClass":
				class = &v1alpha1.AgentClass{}
				if err := sigsyaml.UnmarshalStrict(b, class); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
			case "ToolBinding":
				var tb v1alpha1.ToolBinding
				if err := sigsyaml.UnmarshalStrict(b, &tb); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				tb.Namespace = "examples"
				bindings = append(bindings, tb)
			}
		}
	}
	served := map[string]bool{}
	for i := range bindings {
		b := &bindings[i]
		switch {
		case b.Spec.QueueConfig != nil && b.Spec.QueueConfig.Provider == "sqs":
			if _, err := binding.Resolve(b, pool, class); err == nil {
				t.Errorf("%s: sqs resolved: %v", b.Name, err)
			}
		case binding.Dispatched(b):
			s, err := binding.Resolve(b, pool, class)
			if err != nil {
				t.Errorf("%s: %v", b.Name, err)
			}
			if s.Worker.Model != "queue-llm" {
				t.Errorf("%s: model %q", b.Name, s.Worker.Model)
			}
			served[b.Spec.QueueConfig.Provider] = true
		default:
			if _, err := toolproxy.Build(b); err != nil {
				t.Errorf("%s: %v", b.Name, err)
			}
			served[b.Spec.Type] = true
		}
	}
	for _, want := range []string{"nats", "kafka", "redis", "http", "grpc"} {
		if !served[want] {
			t.Errorf("no example of %s", want)
		}
	}
}
