package scoring

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	schedv1beta1 "k8s.io/api/scheduling/v1beta1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// The node labels of the gang scenario's network hierarchy: the block and rack keys of Kueue's
// Topology Aware Scheduling documentation, which NeuroNetesNetworkTopology reads by default.
const (
	BlockLabel = "cloud.provider.com/topology-block"
	RackLabel  = "cloud.provider.com/topology-rack"
	// GangLabel names a gang pod's PodGroup, as the AgentPool controller sets it
	// (controller/agentpool.GangLabel).
	GangLabel = "neuronetes.io/gang"
	// NodesPerRack and RacksPerBlock shape the gang scenario's hierarchy.
	NodesPerRack  = 4
	RacksPerBlock = 4
)

// GangName is the PodGroup of gang g of pool "m<p>"; its pods are GangName-<j>.
func GangName(p, g int) string { return fmt.Sprintf("m%d-g%d", p, g) }

// ParsePodName returns the pool and, for a gang pod (GangPods' names), the gang of a benchmark
// pod's name ("m3-7": pool m3; "m3-g1-5": pool m3, gang m3-g1).
func ParsePodName(name string) (pool, gang string) {
	pool, rest, _ := strings.Cut(name, "-")
	if strings.HasPrefix(rest, "g") && strings.Contains(rest, "-") {
		gang = name[:strings.LastIndex(name, "-")]
	}
	return pool, gang
}

// GangPods are the size pods of gang g of pool "m<p>" as the AgentPool controller renders a gang
// replica: ReplicaPod's serving pod named <GangName>-<j>, with spec.schedulingGroup naming the
// gang's PodGroup and the GangLabel.
func GangPods(ns, scheduler, image string, nodeSelector, labels map[string]string, p, g, size int) []*corev1.Pod {
	out := make([]*corev1.Pod, size)
	for j := range out {
		pod := ReplicaPod(ns, scheduler, image, nodeSelector, labels, p, j)
		pod.Name = GangName(p, g) + "-" + strconv.Itoa(j)
		pod.Labels[GangLabel] = GangName(p, g)
		pod.Spec.SchedulingGroup = &corev1.PodSchedulingGroup{PodGroupName: ptr.To(GangName(p, g))}
		out[j] = pod
	}
	return out
}

// GangPodGroup is gang g's PodGroup as the controller writes it without a topology constraint:
// gang policy with minCount size, disruption mode all.
func GangPodGroup(ns string, labels map[string]string, p, g, size int) *schedv1beta1.PodGroup {
	return &schedv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: GangName(p, g), Namespace: ns, Labels: labels},
		Spec: schedv1beta1.PodGroupSpec{
			SchedulingPolicy: schedv1beta1.PodGroupSchedulingPolicy{Gang: &schedv1beta1.GangSchedulingPolicy{MinCount: int32(size)}},
			DisruptionMode:   &schedv1beta1.DisruptionMode{All: &schedv1beta1.AllDisruptionMode{}},
		},
	}
}

// Gangs is the gang scenario: Fleet's 48 nodes (prices, spot, warm models) arranged into 3
// blocks of 4 racks of 4 nodes (32 GPUs a rack), each block one zone. The fleet first runs 8
// single replicas of each of the six pools (48 replicas, 96 GPUs, interleaved), then every pool
// adds a gang of 8 pods of 2 GPUs (16 GPUs: two nodes' worth, a tensor-parallel replica across
// nodes), then a second one: 12 gangs, 96 gang pods, 75 % of the GPUs in all. Every gang fits in
// one rack only if the racks it could use still hold 16 free GPUs.
func Gangs() Scenario {
	pools := []int{0, 1, 2, 3, 4, 5}
	zero, base := map[int]int{}, map[int]int{}
	for _, p := range pools {
		base[p] = 8
	}
	s := Scenario{
		Name: "gangs",
		About: "Fleet's 48 nodes as 3 blocks (one per zone) of 4 racks of 4 nodes; 8 single replicas of each of 6 pools, " +
			"then each pool adds a gang of 8 pods x 2 GPUs, twice (interleaved): 12 gangs, 144 pods, 75% of the GPUs",
		Nodes: 48, WarmModels: 3, Topology: true,
		Batches: [][]Replica{interleave(pools, zero, base)},
	}
	for g := range 2 {
		var batch []Replica
		for _, p := range pools {
			batch = append(batch, Replica{Pool: p, Index: g, Size: 8})
		}
		s.Batches = append(s.Batches, batch)
	}
	return s
}

// topologyNode places Layout's node i into the gang scenario's hierarchy: rack i/NodesPerRack,
// block (and zone) rack/RacksPerBlock.
func topologyNode(n Node, i int) Node {
	rack := i / NodesPerRack
	block := rack / RacksPerBlock
	n.Rack, n.Block = fmt.Sprintf("rack-%d", rack), fmt.Sprintf("block-%d", block)
	n.Zone = fmt.Sprintf("zone-%c", 'a'+block)
	return n
}

// Locality is how close each gang's pods are placed on the network hierarchy.
type Locality struct {
	// Gangs counts the gangs placed (with at least one pod); OneNode, OneRack and OneBlock those
	// whose pods all share one node, one rack, one block.
	Gangs, OneNode, OneRack, OneBlock int
	// MeanRacks is the mean number of distinct racks per gang.
	MeanRacks float64
}

// measureLocality computes Locality over the placements of gang pods.
func measureLocality(byName map[string]Node, ps []Placement) Locality {
	type sets struct{ nodes, racks, blocks map[string]bool }
	gangs := map[string]*sets{}
	for _, p := range ps {
		if p.Gang == "" {
			continue
		}
		s := gangs[p.Gang]
		if s == nil {
			s = &sets{map[string]bool{}, map[string]bool{}, map[string]bool{}}
			gangs[p.Gang] = s
		}
		n := byName[p.Node]
		s.nodes[n.Name], s.racks[n.Block+"/"+n.Rack], s.blocks[n.Block] = true, true, true
	}
	var l Locality
	racks := 0
	for _, s := range gangs {
		l.Gangs++
		racks += len(s.racks)
		if len(s.nodes) == 1 {
			l.OneNode++
		}
		if len(s.racks) == 1 {
			l.OneRack++
		}
		if len(s.blocks) == 1 {
			l.OneBlock++
		}
	}
	if l.Gangs > 0 {
		l.MeanRacks = float64(racks) / float64(l.Gangs)
	}
	return l
}

// share is n of the gangs, 0 without gangs.
func (l Locality) share(n int) float64 {
	if l.Gangs == 0 {
		return 0
	}
	return float64(n) / float64(l.Gangs)
}

// LocalityVerdict judges gang locality: every pod placed by both, the candidate's share of gangs
// in one rack higher and its mean distinct racks per gang lower than the baseline's.
func LocalityVerdict(base, cand Report) (ok bool, reasons []string) {
	if cand.Placed < cand.Wanted || base.Placed < base.Wanted {
		reasons = append(reasons, fmt.Sprintf("not every pod placed (%s %d/%d, %s %d/%d)", base.Scheduler, base.Placed, base.Wanted, cand.Scheduler, cand.Placed, cand.Wanted))
	}
	b, c := base.Locality, cand.Locality
	if !(c.share(c.OneRack) > b.share(b.OneRack)) {
		reasons = append(reasons, fmt.Sprintf("share of gangs in one rack not higher (%d/%d vs %d/%d)", c.OneRack, c.Gangs, b.OneRack, b.Gangs))
	}
	if !(c.MeanRacks < b.MeanRacks) {
		reasons = append(reasons, fmt.Sprintf("mean racks per gang not lower (%.2f vs %.2f)", c.MeanRacks, b.MeanRacks))
	}
	return len(reasons) == 0, reasons
}

// writeLocality prints both reports' gang locality side by side.
func writeLocality(w io.Writer, base, cand Report) {
	b, c := base.Locality, cand.Locality
	pct := func(l Locality, n int) string { return fmt.Sprintf("%d/%d %5.1f%%", n, l.Gangs, 100*l.share(n)) }
	fmt.Fprintf(w, "%-22s %18s %18s\n", "gangs in one node", pct(b, b.OneNode), pct(c, c.OneNode))
	fmt.Fprintf(w, "%-22s %18s %18s\n", "gangs in one rack", pct(b, b.OneRack), pct(c, c.OneRack))
	fmt.Fprintf(w, "%-22s %18s %18s\n", "gangs in one block", pct(b, b.OneBlock), pct(c, c.OneBlock))
	ratio := "n/a"
	if b.MeanRacks > 0 {
		ratio = fmt.Sprintf("%.2fx", c.MeanRacks/b.MeanRacks)
	}
	fmt.Fprintf(w, "%-22s %18.2f %18.2f %8s\n", "racks per gang (mean)", b.MeanRacks, c.MeanRacks, ratio)
}
