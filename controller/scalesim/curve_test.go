package scalesim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteCurveSVG(t *testing.T) {
	tr := steady(120)
	m := testModel
	curves := map[string][]Result{}
	for _, n := range []int{1, 2, 3} {
		r := Run(tr, m, &fixed{n: n}, n)
		curves["hpa"] = append(curves["hpa"], r)
		curves["causal-ref"] = append(curves["causal-ref"], r)
	}
	curves["neuronetes"] = []Result{curves["hpa"][1]}
	path := filepath.Join(t.TempDir(), "c.svg")
	if err := WriteCurveSVG(path, "steady", curves, curves["hpa"][1].ReplicaSeconds, 0.99); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	svg := string(b)
	for _, want := range []string{"<svg", "hpa", "causal-ref", "neuronetes", "target 99.0%", "cost: replica-seconds", ">100<"} {
		if !strings.Contains(svg, want) {
			t.Fatalf("SVG without %q", want)
		}
	}
}

func TestUtilization(t *testing.T) {
	// steady: 1,000 prompt tokens/s at 1,000 tokens/s of prefill: one
	// replica of need. Three replicas are about a third used.
	tr := steady(120)
	m := testModel
	m.Warmup = 0
	r := Run(tr, m, &fixed{n: 3}, 3)
	if u := Utilization(NeedSeconds(tr, m), r); u < 0.3 || u > 0.37 {
		t.Fatalf("utilization %.3f, want about 1/3", u)
	}
	if Utilization(0, r) != 0 {
		t.Fatal("unknown need must read 0")
	}
}
