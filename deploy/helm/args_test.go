package helm_test

import (
	"strings"
	"testing"
)

// TestChartArgsAreStrings renders every workload, the gateway and the dispatcher included, and
// checks that each container's command and args are plain strings: an unquoted value that ends in
// a colon (a Redis key prefix such as nn:gw:) turns into a YAML map, which the apiserver rejects.
// No container is given the gateway's diagnostic --debug-trace-file: an execution trace costs
// CPU on every request and is never on in a deployment.
func TestChartArgsAreStrings(t *testing.T) {
	sets := append([]valueSet{{name: "gateway-and-dispatcher", files: []string{"values/local.yaml"},
		set: []string{`gateway={"enabled":true}`, `dispatcher={"enabled":true}`}}}, valueSets...)
	for _, vs := range sets {
		t.Run(vs.name, func(t *testing.T) {
			objs, err := render(t, vs.files, vs.set, vs.extra...)
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range objs {
				for _, path := range [][]any{{"spec", "template", "spec", "containers"}, {"spec", "template", "spec", "initContainers"}} {
					cs, _ := get(o, path...).([]any)
					for _, c := range cs {
						cm := c.(map[string]any)
						for _, field := range []string{"command", "args"} {
							l, _ := cm[field].([]any)
							for i, a := range l {
								s, ok := a.(string)
								if !ok {
									t.Errorf("%s %v container %v %s[%d] is %T %v, not a string", o.kind(), get(o, "metadata", "name"), cm["name"], field, i, a, a)
								}
								if strings.Contains(s, "trace-file") {
									t.Errorf("%s %v container %v %s[%d] is %q: the execution trace is a diagnostic, never deployed", o.kind(), get(o, "metadata", "name"), cm["name"], field, i, s)
								}
							}
						}
					}
				}
			}
		})
	}
}
