package scoring

import (
	"strings"
	"testing"
)

// TestGangsLayout: the gang scenario's nodes form 3 blocks (one zone each) of 4 racks of 4 nodes,
// labelled for NetworkTopology; its gangs are 8 pods, 2 per pool after 8 singles per pool.
func TestGangsLayout(t *testing.T) {
	s := Gangs()
	racks, blocks := map[string]int{}, map[string]string{}
	for _, n := range s.Layout() {
		racks[n.Block+"/"+n.Rack]++
		if z, ok := blocks[n.Block]; ok && z != n.Zone {
			t.Errorf("block %s in zones %s and %s", n.Block, z, n.Zone)
		}
		blocks[n.Block] = n.Zone
		l := NodeObject(n, nil).Labels
		if l[BlockLabel] != n.Block || l[RackLabel] != n.Rack {
			t.Errorf("node %s labels %v", n.Name, l)
		}
	}
	if len(racks) != 12 || len(blocks) != 3 {
		t.Errorf("%d racks in %d blocks, want 12 in 3", len(racks), len(blocks))
	}
	for r, n := range racks {
		if n != NodesPerRack {
			t.Errorf("rack %s has %d nodes", r, n)
		}
	}
	if l := Fleet().Layout()[0]; l.Rack != "" || l.Block != "" {
		t.Errorf("fleet node in rack %q block %q", l.Rack, l.Block)
	}
	pods := GangPods("ns", "s", "img", nil, nil, 3, 1, 8)
	if len(pods) != 8 || pods[7].Name != "m3-g1-7" || *pods[7].Spec.SchedulingGroup.PodGroupName != "m3-g1" || pods[7].Labels[GangLabel] != "m3-g1" {
		t.Errorf("gang pods: %d, last %s", len(pods), pods[len(pods)-1].Name)
	}
	if pg := GangPodGroup("ns", nil, 3, 1, 8); pg.Name != "m3-g1" || pg.Spec.SchedulingPolicy.Gang.MinCount != 8 {
		t.Errorf("pod group %+v", pg)
	}
	for name, want := range map[string][2]string{"m3-7": {"m3", ""}, "m3-g1-5": {"m3", "m3-g1"}, "m12-g10-0": {"m12", "m12-g10"}} {
		if p, g := ParsePodName(name); p != want[0] || g != want[1] {
			t.Errorf("ParsePodName(%s) = %s, %s; want %v", name, p, g, want)
		}
	}
}

// TestLocality: gangs in one node, rack and block are counted, racks per gang averaged, single
// replicas left out; the locality verdict wants more gangs in one rack and fewer racks per gang.
func TestLocality(t *testing.T) {
	nodes := []Node{
		{Name: "a", Block: "b0", Rack: "r0", GPUs: 8}, {Name: "b", Block: "b0", Rack: "r0", GPUs: 8},
		{Name: "c", Block: "b0", Rack: "r1", GPUs: 8}, {Name: "d", Block: "b1", Rack: "r0", GPUs: 8},
	}
	ps := []Placement{
		{Pool: "m0", Gang: "g1", Node: "a"}, {Pool: "m0", Gang: "g1", Node: "a"}, // one node
		{Pool: "m0", Gang: "g2", Node: "a"}, {Pool: "m0", Gang: "g2", Node: "b"}, // one rack
		{Pool: "m0", Gang: "g3", Node: "a"}, {Pool: "m0", Gang: "g3", Node: "c"}, // one block, 2 racks
		{Pool: "m0", Gang: "g4", Node: "a"}, {Pool: "m0", Gang: "g4", Node: "d"}, // rack r0 of two blocks: 2 racks
		{Pool: "m0", Node: "d"}, // single
	}
	r, err := Measure("x", 9, nodes, ps)
	if err != nil {
		t.Fatal(err)
	}
	want := Locality{Gangs: 4, OneNode: 1, OneRack: 2, OneBlock: 3, MeanRacks: 1.5}
	if r.Locality != want {
		t.Errorf("Locality = %+v, want %+v", r.Locality, want)
	}
	base := Report{Scheduler: "default", Placed: 9, Wanted: 9, Locality: want}
	for _, tc := range []struct {
		name string
		loc  Locality
		miss string
	}{
		{"better", Locality{Gangs: 4, OneRack: 3, OneBlock: 4, MeanRacks: 1.25}, ""},
		{"same rack share", Locality{Gangs: 4, OneRack: 2, OneBlock: 4, MeanRacks: 1.25}, "share of gangs in one rack not higher"},
		{"more racks", Locality{Gangs: 4, OneRack: 3, OneBlock: 4, MeanRacks: 1.5}, "mean racks per gang not lower"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cand := base
			cand.Scheduler, cand.Locality = "neuronetes", tc.loc
			// Verdict dispatches to LocalityVerdict: cost and warm share are not judged here.
			ok, reasons := Verdict(base, cand)
			if ok != (tc.miss == "") || (tc.miss != "" && !strings.Contains(strings.Join(reasons, ";"), tc.miss)) {
				t.Errorf("verdict %v %v, want miss %q", ok, reasons, tc.miss)
			}
		})
	}
	var sb strings.Builder
	Write(&sb, base, base)
	if !strings.Contains(sb.String(), "gangs in one rack") || !strings.Contains(sb.String(), "2/4  50.0%") {
		t.Errorf("Write without locality rows:\n%s", sb.String())
	}
}
