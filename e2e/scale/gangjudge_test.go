package scale

import "testing"

func TestGangMix(t *testing.T) {
	for _, tc := range []struct {
		nodes      int
		overcommit float64
		wantGangs  int
		wantGPUs   int
	}{
		{10, 1.25, 5, 112},     // 100 GPUs wanted: 32+8+32+8+32 (the last one crosses)
		{500, 1.25, 250, 5000}, // 125 of each shape
		{1000, 1.25, 500, 10000},
	} {
		m := GangMix(tc.nodes, 8, tc.overcommit)
		gpus := 0
		for _, s := range m {
			gpus += s.Size * s.GPUs
		}
		if len(m) != tc.wantGangs || gpus != tc.wantGPUs {
			t.Errorf("%d nodes ×%.2f: %d gangs, %d GPUs; want %d, %d", tc.nodes, tc.overcommit, len(m), gpus, tc.wantGangs, tc.wantGPUs)
		}
	}
}

func TestJudgeGangs(t *testing.T) {
	big, small := GangShapes[0], GangShapes[1] // 4 × 8 GPUs, 2 × 4 GPUs
	nodes := []string{"n0", "n1", "n2", "n3", "n4"}
	for _, tc := range []struct {
		name   string
		shapes map[string]GangShape
		pods   map[string]GangPod
		want   GangJudgement // Problems not compared
	}{
		{"one whole, one pending that cannot fit", map[string]GangShape{"a": big, "b": big}, map[string]GangPod{
			"a0": {Gang: "a", Node: "n0", Want: 8, Holds: 8}, "a1": {Gang: "a", Node: "n1", Want: 8, Holds: 8},
			"a2": {Gang: "a", Node: "n2", Want: 8, Holds: 8}, "a3": {Gang: "a", Node: "n3", Want: 8, Holds: 8},
			"b0": {Gang: "b", Want: 8}, "b1": {Gang: "b", Want: 8}, "b2": {Gang: "b", Want: 8}, "b3": {Gang: "b", Want: 8},
		}, GangJudgement{Gangs: 2, Whole: 1, Pending: 1, BoundGPUs: 32}},
		{"partial gang holds GPUs", map[string]GangShape{"a": big}, map[string]GangPod{
			"a0": {Gang: "a", Node: "n0", Want: 8, Holds: 8}, "a1": {Gang: "a", Node: "n1", Want: 8, Holds: 8},
			"a2": {Gang: "a", Want: 8}, "a3": {Gang: "a", Want: 8},
		}, GangJudgement{Gangs: 1, Partial: 1, Stranded: 16, BoundGPUs: 16}},
		{"allocated claim of an unbound pod is stranded", map[string]GangShape{"s": small}, map[string]GangPod{
			"s0": {Gang: "s", Want: 4, Holds: 4}, "s1": {Gang: "s", Want: 4},
		}, GangJudgement{Gangs: 1, Pending: 1, Stranded: 4, Fittable: 1}},
		{"pending gang that fits the free GPUs", map[string]GangShape{"s": small, "t": small}, map[string]GangPod{
			"s0": {Gang: "s", Node: "n0", Want: 4, Holds: 4}, "s1": {Gang: "s", Node: "n0", Want: 4, Holds: 4},
			"t0": {Gang: "t", Want: 4}, "t1": {Gang: "t", Want: 4},
		}, GangJudgement{Gangs: 2, Whole: 1, Pending: 1, Fittable: 1, BoundGPUs: 8}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := JudgeGangs(tc.pods, tc.shapes, nodes, 8)
			problems := got.Problems
			got.Problems = nil
			if got.Gangs != tc.want.Gangs || got.Whole != tc.want.Whole || got.Pending != tc.want.Pending ||
				got.Partial != tc.want.Partial || got.Stranded != tc.want.Stranded || got.Fittable != tc.want.Fittable || got.BoundGPUs != tc.want.BoundGPUs {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			if (tc.want.Partial+tc.want.Stranded+tc.want.Fittable > 0) != (len(problems) > 0) {
				t.Errorf("problems %v", problems)
			}
		})
	}
}
