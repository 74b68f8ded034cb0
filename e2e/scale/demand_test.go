package scale

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestDemandProfiles: the demand-shaped layout's profiles are those the run's pods request, found
// through templates and classes read from the API, and the templates carry the run label.
func TestDemandProfiles(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewSimpleClientset()
	for _, dc := range FallbackDeviceClasses() {
		if _, err := cs.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{RunID: "run1", Namespace: "ns", GPUProfile: "dgxh100", Mix: DefaultMix(100),
		Nodes: []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}}}
	got, err := DemandProfiles(ctx, cs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != strings.Join(UsedProfiles(), ",") {
		t.Errorf("profiles %v, want %v", got, UsedProfiles())
	}
	tmpls, _ := cs.ResourceV1().ResourceClaimTemplates("ns").List(ctx, metav1.ListOptions{})
	if len(tmpls.Items) != len(Kinds) || tmpls.Items[0].Labels[LabelRun] != "run1" {
		t.Errorf("templates %d (labels %v), want one per kind with the run label", len(tmpls.Items), tmpls.Items[0].Labels)
	}
	// Only whole-GPU pods: no MIG profile in demand.
	cs2 := fake.NewSimpleClientset()
	for _, dc := range FallbackDeviceClasses() {
		_, _ = cs2.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{})
	}
	cfg.Mix = Mix{KindWhole: 10, KindPair: 2}
	if got, err := DemandProfiles(ctx, cs2, cfg); err != nil || len(got) != 0 {
		t.Errorf("whole-GPU workload: profiles %v, %v; want none", got, err)
	}
}

// TestVerdict: only the demand-shaped layout is judged, by its MIG-claim algorithm p99 ratio.
func TestVerdict(t *testing.T) {
	run := func(layout string, p99ms float64) RunResult {
		return RunResult{Layout: layout, Nodes: 150, Phases: []PhaseResult{
			{Kind: KindMIG1g, Algorithm: Stats{P50: 0.01, P99: p99ms / 1000}},
			{Kind: KindMIG3g, Algorithm: Stats{P50: 0.01, P99: p99ms / 2000}},
		}, Usage: map[string]ProcUsage{"kube-scheduler": {CPU: time.Second}}}
	}
	base := run(LayoutWhole, 40)
	tests := []struct {
		runs   []RunResult
		judged bool
		ok     bool
	}{
		{[]RunResult{base, run(LayoutMIGSelected, 200)}, false, false},
		{[]RunResult{base, run(LayoutMIGSelected, 200), run(LayoutMIGDemand, 59)}, true, true},
		{[]RunResult{base, run(LayoutMIGDemand, 61)}, true, false},
	}
	for i, tc := range tests {
		var out strings.Builder
		v := WriteComparison(&out, base, tc.runs)
		if v.Judged != tc.judged || (tc.judged && v.OK != tc.ok) {
			t.Errorf("case %d: verdict %+v, want judged %v ok %v\n%s", i, v, tc.judged, tc.ok, out.String())
		}
		if !strings.Contains(out.String(), "MIG-claim pods' scheduling-algorithm p99") {
			t.Errorf("case %d: absolute p99 not reported:\n%s", i, out.String())
		}
	}
	if s := (Verdict{Judged: true, OK: false, Ratio: 2.2, Nodes: 150}).String(); !strings.Contains(s, "VERDICT: FAIL") || !strings.Contains(s, "2.20x") {
		t.Errorf("verdict line %q", s)
	}
}

// TestNVIDIAVerdict: the demand-shaped layout is judged against NVIDIA's slices by its MIG-claim
// algorithm p99 ratio, and only when both ran.
func TestNVIDIAVerdict(t *testing.T) {
	run := func(layout string, p99ms float64, devices int) RunResult {
		return RunResult{Layout: layout, Nodes: 150, DevicesPerNode: devices, Phases: []PhaseResult{
			{Kind: KindWhole, Algorithm: Stats{P50: 0.005, P99: 0.01}},
			{Kind: KindMIG1g, Algorithm: Stats{P50: 0.01, P99: p99ms / 1000}},
		}, Usage: map[string]ProcUsage{"kube-scheduler": {CPU: time.Second}}}
	}
	tests := []struct {
		name   string
		runs   []RunResult
		judged bool
		ok     bool
		ratio  float64
	}{
		{"no NVIDIA layout", []RunResult{run(LayoutWhole, 10, 8), run(LayoutMIGDemand, 30, 80)}, false, false, 0},
		{"no demand layout", []RunResult{run(LayoutWhole, 10, 8), run(LayoutNVIDIA, 30, 600)}, false, false, 0},
		{"cheaper than NVIDIA's", []RunResult{run(LayoutMIGDemand, 30, 80), run(LayoutNVIDIA, 120, 600)}, true, true, 0.25},
		{"equal passes", []RunResult{run(LayoutMIGDemand, 40, 80), run(LayoutNVIDIA, 40, 600)}, true, true, 1},
		{"dearer fails", []RunResult{run(LayoutMIGDemand, 50, 80), run(LayoutNVIDIA, 40, 600)}, true, false, 1.25},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			v := WriteNVIDIAComparison(&out, tc.runs)
			if v.Against != LayoutNVIDIA || v.Judged != tc.judged || v.OK != tc.ok || (tc.judged && math.Abs(v.Ratio-tc.ratio) > 1e-9) {
				t.Fatalf("verdict %+v, want judged %v ok %v ratio %.2f\n%s", v, tc.judged, tc.ok, tc.ratio, out.String())
			}
			line := v.String()
			if tc.judged && (!strings.Contains(line, "NVIDIA's DRA driver") || !strings.Contains(line, passFail(tc.ok)) || !strings.Contains(out.String(), "devices per node 80 / 600")) {
				t.Errorf("verdict line %q, report:\n%s", line, out.String())
			}
			if !tc.judged && !strings.Contains(line, "VERDICT: none") {
				t.Errorf("unjudged verdict line %q", line)
			}
		})
	}
}
