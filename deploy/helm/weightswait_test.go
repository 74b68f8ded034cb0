package helm_test

import (
	"strings"
	"testing"
)

// TestChartWeightsWaitImage: with the node agent on, the controller's webhook adds the wait-weights
// init container from the node agent's own image (tag or digest, as the DaemonSet runs it); with the
// node agent off, it adds none.
func TestChartWeightsWaitImage(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
		want bool
	}{
		{"default", nil, true},
		{"digest", []string{`image={"digests":{"nodeagent":"sha256:` + strings.Repeat("a", 64) + `"}}`}, true},
		{"no node agent", []string{`nodeagent={"enabled":false}`}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			a := args(container(find(objs, "Deployment", "nn-neuronetes-controller"), "controller"))
			var got string
			for _, x := range a {
				if v, ok := strings.CutPrefix(x, "--weights-wait-image="); ok {
					got = v
				}
			}
			if !tc.want {
				if got != "" {
					t.Fatalf("--weights-wait-image=%s without a node agent", got)
				}
				return
			}
			ds := find(objs, "DaemonSet", "nn-neuronetes-nodeagent")
			if img, _ := container(ds, "nodeagent")["image"].(string); got == "" || got != img {
				t.Fatalf("--weights-wait-image=%q, want the node agent's image %q", got, img)
			}
		})
	}
}
