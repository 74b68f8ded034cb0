package scoring

import (
	"fmt"
	"slices"
)

// Replica names replica Index of pool "m<Pool>" (model Pool), as ReplicaPod renders it; with
// Size > 1 it is gang Index of the pool, Size pods (GangPods) in one PodGroup (GangPodGroup).
type Replica struct{ Pool, Index, Size int }

// Pods is the number of pods the replica has.
func (r Replica) Pods() int { return max(r.Size, 1) }

// Scenario is one benchmark workload: the nodes (Layout), the pools and the order in which their
// replicas arrive. Both the simulation (hack/tools/scheduler TestScoringSimulation) and the live
// bench (e2e/cmd/scoring-bench) run it the same way: each batch's pods are created together and
// all of them are bound before the next batch is created.
type Scenario struct {
	// Name selects the scenario (ScenarioByName); About says what it models.
	Name, About string
	// Nodes is the node count; node i is Layout(i, WarmModels).
	Nodes int
	// WarmModels: models 0..WarmModels-1 are warm on Layout's nodes, the others nowhere.
	WarmModels int
	// Topology arranges the nodes into blocks (one per zone) of racks (topologyNode), labelled
	// BlockLabel and RackLabel.
	Topology bool
	// Batches are the replicas in arrival order.
	Batches [][]Replica
}

// Layout returns the scenario's nodes.
func (s Scenario) Layout() []Node {
	nodes := make([]Node, s.Nodes)
	for i := range nodes {
		nodes[i] = Layout(i, s.WarmModels)
		if s.Topology {
			nodes[i] = topologyNode(nodes[i], i)
		}
	}
	return nodes
}

// Wanted is the number of pods the scenario creates (a gang counts its pods).
func (s Scenario) Wanted() int {
	n := 0
	for _, b := range s.Batches {
		for _, r := range b {
			n += r.Pods()
		}
	}
	return n
}

// interleave returns, for each pool p in pools, replicas from[p] to to[p]-1, round-robin over the
// pools (replica from[p] of every pool, then the next, ...), as pools that scale up together
// create their pods.
func interleave(pools []int, from, to map[int]int) []Replica {
	var out []Replica
	for step := 0; ; step++ {
		added := false
		for _, p := range pools {
			if r := from[p] + step; r < to[p] {
				out = append(out, Replica{Pool: p, Index: r})
				added = true
			}
		}
		if !added {
			return out
		}
	}
}

// Fleet is the contended scenario the verdict is judged on: 48 nodes (3 zones, 40 % spot) serving
// six models. Models m0-m2 are warm on 6 nodes each (12.5 % of the fleet per model, 18 warm nodes
// in all, 24 two-GPU slots per model); m3-m5 are warm nowhere (new or rarely used models). Every
// pool first scales to 12 replicas (the fleet's base load, 72 replicas, the six pools'
// pods interleaved), then every pool scales to 24 (the peak, 72 more, interleaved): 144 replicas,
// 75 % of the fleet's GPUs. At most 72 of the 144 (50 %) can be warm, and only when the 72
// replicas of m3-m5 leave the warm nodes' GPUs to the models cached there.
func Fleet() Scenario {
	pools := []int{0, 1, 2, 3, 4, 5}
	zero, base, peak := map[int]int{}, map[int]int{}, map[int]int{}
	for _, p := range pools {
		base[p], peak[p] = 12, 24
	}
	return Scenario{
		Name: "fleet",
		About: "48 nodes (3 zones, 40% spot), 6 models: m0-m2 warm on 6 nodes each, m3-m5 warm nowhere; " +
			"every pool to 12 replicas, then every pool to 24 (pools interleaved): 144 replicas of 2 GPUs, 75% of the GPUs",
		Nodes: 48, WarmModels: 3,
		Batches: [][]Replica{interleave(pools, zero, base), interleave(pools, base, peak)},
	}
}

// Sequential is the uncontended scenario: 48 nodes, 3 models each warm on 6 nodes, 3 pools of 40
// replicas placed one pool after the other. The warm share is at most 60 % (24 warm slots per
// model), and the default scheduler reaches it through the controller's preferred affinity.
func Sequential() Scenario {
	s := Scenario{Name: "sequential", About: "48 nodes (3 zones, 40% spot), 3 models each warm on 6 nodes; " +
		"3 pools of 40 replicas of 2 GPUs, one pool after the other", Nodes: 48, WarmModels: 3}
	for p := range 3 {
		s.Batches = append(s.Batches, interleave([]int{p}, map[int]int{}, map[int]int{p: 40}))
	}
	return s
}

// Burst is Fleet's nodes and pools with the fleet already running when the cached models burst:
// m3-m5 scale to 24 replicas and m0-m2 to 8 (interleaved), then m0-m2 scale to 24 (interleaved).
func Burst() Scenario {
	warm, cold := []int{0, 1, 2}, []int{3, 4, 5}
	zero, base, peak := map[int]int{}, map[int]int{0: 8, 1: 8, 2: 8, 3: 24, 4: 24, 5: 24}, map[int]int{0: 24, 1: 24, 2: 24}
	return Scenario{
		Name: "burst",
		About: "Fleet's 48 nodes and 6 models; m3-m5 to 24 replicas and m0-m2 to 8 (interleaved), " +
			"then m0-m2 burst to 24 (interleaved): 144 replicas of 2 GPUs, 75% of the GPUs",
		Nodes: 48, WarmModels: 3,
		Batches: [][]Replica{interleave(append(slices.Clone(warm), cold...), zero, base), interleave(warm, base, peak)},
	}
}

// ScenarioNames lists the scenarios ScenarioByName knows.
var ScenarioNames = []string{"fleet", "burst", "gangs", "sequential"}

// ScenarioByName returns the named scenario.
func ScenarioByName(name string) (Scenario, error) {
	switch name {
	case "fleet":
		return Fleet(), nil
	case "burst":
		return Burst(), nil
	case "gangs":
		return Gangs(), nil
	case "sequential":
		return Sequential(), nil
	}
	return Scenario{}, fmt.Errorf("scenario %q: want one of %v", name, slices.Clone(ScenarioNames))
}
