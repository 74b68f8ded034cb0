package scale

import (
	"fmt"
	"sort"
)

// GangShape is one kind of gang of the gang benchmark: Size pods of GPUs whole GPUs each.
type GangShape struct {
	Name       string
	Size, GPUs int
}

// GangShapes are the gangs the benchmark places, in turn: a 4-node tensor-parallel replica of
// 8 GPUs a pod (32 GPUs) and a 2-pod replica of 4 GPUs a pod (8 GPUs), so that whole nodes and
// half nodes compete.
var GangShapes = []GangShape{{Name: "tp4x8", Size: 4, GPUs: 8}, {Name: "tp2x4", Size: 2, GPUs: 4}}

// GangMix returns the gangs to create, shapes in turn, until their GPUs reach overcommit × the
// cluster's (nodes × gpusPerNode): more than fits, so that gangs contend.
func GangMix(nodes, gpusPerNode int, overcommit float64) []GangShape {
	want := int(overcommit * float64(nodes*gpusPerNode))
	var out []GangShape
	for sum := 0; sum < want; {
		s := GangShapes[len(out)%len(GangShapes)]
		out = append(out, s)
		sum += s.Size * s.GPUs
	}
	return out
}

// GangPod is the final state of one pod of a gang: its node ("" when not bound) and the GPUs its
// claim holds (0 when the claim is not allocated).
type GangPod struct {
	Gang, Node   string
	Want, Holds  int // GPUs asked and allocated
	ClaimMissing bool
}

// GangJudgement is what the final state of a gang phase says.
type GangJudgement struct {
	Gangs, Whole, Pending int
	// Partial counts gangs with some but not all pods bound; Stranded the GPUs allocated to
	// claims of pods that are not bound or belong to a gang that is not whole.
	Partial, Stranded int
	// Fittable counts pending gangs the free GPUs could hold (a deadlock or a missed placement):
	// enough nodes with room for one of its pods each.
	Fittable  int
	BoundGPUs int
	Problems  []string // the first few partial gangs and stranded claims, for the report
}

// JudgeGangs judges the final state: pods by name, each gang's size and pod GPUs, and the nodes'
// GPU capacity (every node has gpusPerNode).
func JudgeGangs(pods map[string]GangPod, shapes map[string]GangShape, nodes []string, gpusPerNode int) GangJudgement {
	j := GangJudgement{Gangs: len(shapes)}
	bound := map[string]int{}
	free := map[string]int{}
	for _, n := range nodes {
		free[n] = gpusPerNode
	}
	names := make([]string, 0, len(pods))
	for n := range pods {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := pods[n]
		if p.Node != "" {
			bound[p.Gang]++
			free[p.Node] -= p.Want
			j.BoundGPUs += p.Want
		}
	}
	note := func(f string, a ...any) {
		if len(j.Problems) < 5 {
			j.Problems = append(j.Problems, fmt.Sprintf(f, a...))
		}
	}
	gangs := make([]string, 0, len(shapes))
	for g := range shapes {
		gangs = append(gangs, g)
	}
	sort.Strings(gangs)
	for _, g := range gangs {
		switch b := bound[g]; {
		case b == shapes[g].Size:
			j.Whole++
		case b == 0:
			j.Pending++
			if fits(free, shapes[g]) {
				j.Fittable++
				note("gang %s (%d × %d GPUs) pending though the free GPUs hold it", g, shapes[g].Size, shapes[g].GPUs)
			}
		default:
			j.Partial++
			note("gang %s: %d of %d pods bound", g, b, shapes[g].Size)
		}
	}
	for _, n := range names {
		p := pods[n]
		if p.Holds > 0 && (p.Node == "" || bound[p.Gang] != shapes[p.Gang].Size) {
			j.Stranded += p.Holds
			note("pod %s (gang %s, node %q) holds %d GPUs", n, p.Gang, p.Node, p.Holds)
		}
	}
	return j
}

// fits reports whether s.Size nodes each have s.GPUs free.
func fits(free map[string]int, s GangShape) bool {
	n := 0
	for _, f := range free {
		if f >= s.GPUs {
			n++
		}
	}
	return n >= s.Size
}
