package scale

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/neuronetes/neuronetes/driver/model"
)

func testNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)}}
}

func nodeSlices(t *testing.T, layoutName string) []resourceapi.ResourceSlice {
	t.Helper()
	layout, err := LayoutByName(layoutName)
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := Inventory(context.Background(), "dgxh100", "n1")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := NodeSlices(testNode("n1"), gpus, layout, "run1")
	if err != nil {
		t.Fatal(err)
	}
	out := make([]resourceapi.ResourceSlice, len(objs))
	for i, o := range objs {
		out[i] = *o
	}
	return out
}

func TestNodeSlicesLayouts(t *testing.T) {
	tests := []struct {
		layout      string
		devices     int // per node: 8 GPUs
		counterSets int
	}{
		{LayoutWhole, 8, 0},
		{LayoutMIGSelected, 8 * (1 + 7 + 2), 8}, // whole GPU, 7 1g placements, 2 3g placements
		{LayoutMIGAll, 8 * 29, 8},               // every H100 profile and placement
		{LayoutMIGMixed, 8 + 4*9, 4},            // 8 whole GPUs, MIG on 4
		{LayoutMIGDemand, 8, 0},                 // no demand computed (Run does that): whole GPUs only
	}
	for _, tc := range tests {
		t.Run(tc.layout, func(t *testing.T) {
			sl := nodeSlices(t, tc.layout)
			objs := make([]*resourceapi.ResourceSlice, len(sl))
			for i := range sl {
				objs[i] = &sl[i]
				s := sl[i]
				if s.Spec.Pool.ResourceSliceCount != int64(len(sl)) || s.Spec.Pool.Name != "n1" || *s.Spec.NodeName != "n1" {
					t.Errorf("slice %s: pool %+v node %v", s.Name, s.Spec.Pool, s.Spec.NodeName)
				}
				if s.Labels[LabelRun] != "run1" || len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != "uid-n1" {
					t.Errorf("slice %s: labels %v owners %v", s.Name, s.Labels, s.OwnerReferences)
				}
			}
			d, c := DeviceCount(objs)
			if d != tc.devices || c != tc.counterSets {
				t.Errorf("devices %d counter sets %d, want %d and %d", d, c, tc.devices, tc.counterSets)
			}
		})
	}
}

func TestInventorySeedsDiffer(t *testing.T) {
	a, err := Inventory(context.Background(), "dgxh100", "n1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := Inventory(context.Background(), "dgxh100", "n2")
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != 8 || a[0].UUID == b[0].UUID {
		t.Errorf("got %d GPUs, UUIDs %s and %s: want 8 GPUs with UUIDs differing by node", len(a), a[0].UUID, b[0].UUID)
	}
}

func TestMix(t *testing.T) {
	tests := []struct {
		total, nodes int
		fits         bool
		want         Mix
	}{
		{1000, 150, true, Mix{KindPair: 100, KindWhole: 200, KindMIG3g: 200, KindMIG1g: 500}},
		{1000, 137, false, Mix{KindPair: 100, KindWhole: 200, KindMIG3g: 200, KindMIG1g: 500}},
		{4, 1, true, Mix{KindPair: 1, KindWhole: 1, KindMIG3g: 1, KindMIG1g: 1}},
	}
	for _, tc := range tests {
		m := DefaultMix(tc.total)
		for k, n := range tc.want {
			if m[k] != n {
				t.Errorf("DefaultMix(%d)[%s] = %d, want %d", tc.total, k, m[k], n)
			}
		}
		if err := m.CheckFits(tc.nodes, 8); (err == nil) != tc.fits {
			t.Errorf("DefaultMix(%d).CheckFits(%d) = %v, want fits=%v", tc.total, tc.nodes, err, tc.fits)
		}
	}
}

func TestClaimSpec(t *testing.T) {
	tests := []struct {
		kind       Kind
		mig        bool
		class      string
		count      int64
		constraint bool
	}{
		{KindPair, true, ClassGPU, 2, true},
		{KindWhole, true, ClassGPU, 1, false},
		{KindMIG1g, true, ClassMIG1g, 1, false},
		{KindMIG3g, true, ClassMIG3g, 1, false},
		{KindMIG1g, false, ClassGPU, 1, false},
		{KindMIG3g, false, ClassGPU, 1, false},
	}
	for _, tc := range tests {
		s := ClaimSpec(tc.kind, tc.mig)
		r := s.Devices.Requests[0].Exactly
		if r.DeviceClassName != tc.class || r.Count != tc.count || (len(s.Devices.Constraints) == 1) != tc.constraint {
			t.Errorf("%s mig=%v: class %s count %d constraints %v", tc.kind, tc.mig, r.DeviceClassName, r.Count, s.Devices.Constraints)
		}
		if tc.constraint && string(*s.Devices.Constraints[0].MatchAttribute) != "gpu.neuronetes.io/nvlinkDomain" {
			t.Errorf("pair matchAttribute %s", *s.Devices.Constraints[0].MatchAttribute)
		}
	}
}

func allocated(name string, kind Kind, devices ...string) resourceapi.ResourceClaim {
	c := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kind": string(kind)}}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: model.DriverName, Pool: "n1", Device: d})
	}
	return c
}

// mig3 and mig1 name the dynamic MIG devices of the profiles the benchmark's classes select.
func mig3(gpu, start int) string { return model.DynamicMIGName(gpu, "3g.40gb", start) }
func mig1(gpu, start int) string { return model.DynamicMIGName(gpu, "1g.10gb", start) }

// wantProblem checks that problems is empty when want is, and otherwise that
// one of them contains want.
func wantProblem(t *testing.T, problems []string, want string) {
	t.Helper()
	if want == "" {
		if len(problems) > 0 {
			t.Errorf("unexpected problems: %v", problems)
		}
		return
	}
	if !strings.Contains(strings.Join(problems, "\n"), want) {
		t.Errorf("problems %v, want one containing %q", problems, want)
	}
}

func TestCheckNode(t *testing.T) {
	tests := []struct {
		name    string
		claims  []resourceapi.ResourceClaim
		problem string // substring of the expected problem; empty for none
	}{
		{"consistent", []resourceapi.ResourceClaim{
			allocated("a", KindMIG3g, mig3(0, 0)), allocated("b", KindMIG3g, mig3(0, 4)),
			allocated("c", KindMIG1g, mig1(1, 0)), allocated("d", KindPair, "gpu-2", "gpu-3"),
			allocated("e", KindWhole, "gpu-4"),
		}, ""},
		{"overlapping placements", []resourceapi.ResourceClaim{
			allocated("a", KindMIG3g, mig3(0, 0)), allocated("b", KindMIG1g, mig1(0, 1)),
		}, "memory-slot-1 used 2"},
		{"whole GPU beside MIG", []resourceapi.ResourceClaim{
			allocated("a", KindWhole, "gpu-0"), allocated("b", KindMIG1g, mig1(0, 6)),
		}, "used 2, capacity 1"},
		{"pair of one device", []resourceapi.ResourceClaim{allocated("a", KindPair, "gpu-1", "gpu-1")}, "not an NVLink pair"},
		{"wrong profile", []resourceapi.ResourceClaim{allocated("a", KindMIG1g, mig3(0, 0))}, "profile \"3g.40gb\""},
		{"unknown device", []resourceapi.ResourceClaim{allocated("a", KindWhole, "gpu-9")}, "not in the node's slices"},
	}
	sl := nodeSlices(t, LayoutMIGSelected)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, CheckNode("n1", sl, tc.claims, true), tc.problem)
		})
	}
}

func TestCheckClaims(t *testing.T) {
	unalloc := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "u"}}
	claims := []resourceapi.ResourceClaim{
		allocated("a", KindWhole, "gpu-0"), allocated("b", KindWhole, "gpu-0"),
		allocated("c", KindPair, "gpu-1"), allocated("d", KindWhole, "gpu-5"), unalloc,
	}
	podNode := map[string]string{"a": "n1", "b": "n1", "c": "n1", "d": "n2", "u": ""}
	var v VerifyResult
	byNode := map[string][]resourceapi.ResourceClaim{}
	got := strings.Join(checkClaims(claims, podNode, byNode, &v), "\n")
	for _, want := range []string{"allocated to claims a and b", "claim c: 1 devices allocated, want 2", "claim d: device n1/gpu-5 is not on the pod's node \"n2\""} {
		if !strings.Contains(got, want) {
			t.Errorf("problems %q, want %q", got, want)
		}
	}
	if v.Claims != 5 || v.Unallocated != 1 || len(byNode["n1"]) != 3 {
		t.Errorf("claims %d unallocated %d on n1 %d", v.Claims, v.Unallocated, len(byNode["n1"]))
	}
}

const metricsText = `# HELP scheduler_scheduling_attempt_duration_seconds x
# TYPE scheduler_scheduling_attempt_duration_seconds histogram
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="0.001"} 0
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="0.002"} 10
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="0.004"} 90
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="0.008"} 100
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="scheduled",le="+Inf"} 100
scheduler_scheduling_attempt_duration_seconds_sum{profile="default-scheduler",result="scheduled"} 0.3
scheduler_scheduling_attempt_duration_seconds_count{profile="default-scheduler",result="scheduled"} 100
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="unschedulable",le="0.001"} 5
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="unschedulable",le="0.002"} 5
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="unschedulable",le="0.004"} 5
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="unschedulable",le="0.008"} 5
scheduler_scheduling_attempt_duration_seconds_bucket{profile="default-scheduler",result="unschedulable",le="+Inf"} 5
scheduler_scheduling_attempt_duration_seconds_sum{profile="default-scheduler",result="unschedulable"} 0.004
scheduler_scheduling_attempt_duration_seconds_count{profile="default-scheduler",result="unschedulable"} 5
# TYPE scheduler_schedule_attempts_total counter
scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"} 100
scheduler_schedule_attempts_total{profile="default-scheduler",result="unschedulable"} 5
`

func TestHistogramQuantiles(t *testing.T) {
	fams, err := ParseFamilies(strings.NewReader(metricsText))
	if err != nil {
		t.Fatal(err)
	}
	h := fams.Histogram(MetricAttempt, map[string]string{"result": "scheduled"})
	empty := Histogram{}
	tests := []struct {
		name string
		h    Histogram
		q    float64
		want float64
	}{
		{"p50 inside the 2-4ms bucket", h, 0.5, 0.002 + 0.002*40/80},
		{"p99 inside the 4-8ms bucket", h, 0.99, 0.004 + 0.004*9/10},
		{"p5 in the 1-2ms bucket", h, 0.05, 0.001 + 0.001*5/10},
		{"delta against itself is empty", h.Sub(h), 0.5, math.NaN()},
		{"delta against empty is itself", h.Sub(empty), 0.5, 0.003},
	}
	for _, tc := range tests {
		got := tc.h.Quantile(tc.q)
		if math.IsNaN(tc.want) != math.IsNaN(got) || (!math.IsNaN(got) && math.Abs(got-tc.want) > 1e-9) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	if h.Count != 100 || math.Abs(h.Mean()-0.003) > 1e-9 {
		t.Errorf("count %v mean %v", h.Count, h.Mean())
	}
	all := fams.Histogram(MetricAttempt, nil)
	if all.Count != 105 {
		t.Errorf("all series count %v, want 105", all.Count)
	}
	if v := fams.Counter(MetricAttempts, map[string]string{"result": "unschedulable"}); v != 5 {
		t.Errorf("unschedulable attempts %v", v)
	}
}

func TestSampleStats(t *testing.T) {
	s := make([]float64, 200)
	for i := range s {
		s[i] = float64(200 - i) // 200..1, unsorted
	}
	got := sampleStats(s)
	if got.N != 200 || got.P50 != 100 || got.P99 != 198 {
		t.Errorf("got %+v, want N 200 p50 100 p99 198", got)
	}
	if e := sampleStats(nil); !math.IsNaN(e.P50) {
		t.Errorf("empty: %+v", e)
	}
}

func TestReadProc(t *testing.T) {
	dir := t.TempDir()
	pdir := filepath.Join(dir, "42")
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := "42 (kube sched) S 1 42 42 0 -1 4194560 100 0 0 0 250 150 0 0 20 0 12 0 100 1000 500"
	_ = os.WriteFile(filepath.Join(pdir, "stat"), []byte(stat), 0o644)
	_ = os.WriteFile(filepath.Join(pdir, "status"), []byte("Name:\tkube\nVmRSS:\t   2048 kB\nThreads: 3\n"), 0o644)
	got, err := ReadProc(dir, 42)
	if err != nil {
		t.Fatal(err)
	}
	if got.CPU != 4*time.Second || got.RSS != 2048*1024 {
		t.Errorf("got %+v, want 4s CPU and 2 MiB", got)
	}
	self, err := ReadProc("/proc", os.Getpid())
	if err != nil || self.RSS <= 0 {
		t.Errorf("own process: %+v %v", self, err)
	}
	_ = os.WriteFile(filepath.Join(dir, "pid"), []byte("42\n"), 0o644)
	if pid, err := PidFromFile(filepath.Join(dir, "pid")); err != nil || pid != 42 {
		t.Errorf("pid file: %d %v", pid, err)
	}
}

func TestCheckDeviceClass(t *testing.T) {
	sl := nodeSlices(t, LayoutMIGAll)
	var devices []resourceapi.Device
	for _, s := range sl {
		devices = append(devices, s.Spec.Devices...)
	}
	class := func(expr string) *resourceapi.DeviceClass {
		return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}}}
	}
	tests := []struct {
		name    string
		class   *resourceapi.DeviceClass
		wantErr string
	}{
		{"unguarded MIG attribute fails on whole GPUs", class(`device.driver == "gpu.neuronetes.io" && device.attributes["gpu.neuronetes.io"].profile == "1g.10gb"`), "no such key: profile"},
		{"syntax error", class(`device.driver ==`), "selector #0"},
	}
	for _, dc := range FallbackDeviceClasses() {
		tests = append(tests, struct {
			name    string
			class   *resourceapi.DeviceClass
			wantErr string
		}{"fallback " + dc.Name, dc, ""})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckDeviceClass(context.Background(), tc.class, model.DriverName, devices)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("got %v, want error containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestCheckModel(t *testing.T) {
	tests := []struct {
		name    string
		claims  []resourceapi.ResourceClaim
		problem string // substring of the expected problem; empty for none
	}{
		{"consistent", []resourceapi.ResourceClaim{
			allocated("a", KindMIG3g, mig3(0, 0)), allocated("b", KindMIG1g, mig1(0, 3)), allocated("c", KindMIG1g, mig1(0, 4)),
			allocated("d", KindPair, "gpu-2", "gpu-3"), allocated("e", KindWhole, "gpu-4"),
		}, ""},
		{"overlapping placements", []resourceapi.ResourceClaim{
			allocated("a", KindMIG3g, mig3(0, 0)), allocated("b", KindMIG1g, mig1(0, 1)),
		}, "overlaps MIG instance"},
		// Memory is what refuses a third instance next to two 3g.40gb: only the model has every counter.
		{"over a counter", []resourceapi.ResourceClaim{
			allocated("a", KindMIG3g, mig3(1, 0)), allocated("b", KindMIG3g, mig3(1, 4)), allocated("c", KindMIG1g, mig1(1, 3)),
		}, "counter \"memory\""},
		{"whole GPU beside MIG", []resourceapi.ResourceClaim{
			allocated("a", KindWhole, "gpu-0"), allocated("b", KindMIG1g, mig1(0, 6)),
		}, "shared with 1 other"},
		{"not published", []resourceapi.ResourceClaim{allocated("a", KindMIG1g, model.DynamicMIGName(0, "2g.20gb", 0))}, "no MIG profile"},
	}
	gpus, err := Inventory(context.Background(), "dgxh100", "n1")
	if err != nil {
		t.Fatal(err)
	}
	layout, _ := LayoutByName(LayoutMIGSelected)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, CheckModel("n1", gpus, layout.Options, tc.claims), tc.problem)
		})
	}
}
