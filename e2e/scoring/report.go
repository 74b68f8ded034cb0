// Package scoring measures placement quality for the scoring benchmark (hack/bench.d/64-scoring.sh,
// e2e/cmd/scoring-bench): the same workload placed by two schedulers on the same kwok nodes, and
// what each placement costs, how much of it lands on warm nodes, how it spreads and how much of it
// runs on spot capacity. Everything here is pure; the command does the cluster work.
package scoring

import (
	"fmt"
	"io"
)

// Node is a benchmark node as the metrics see it.
type Node struct {
	Name, Zone string
	// Block and Rack place the node in the network hierarchy ("": none).
	Block, Rack  string
	Spot         bool
	PricePerHour float64
	GPUs         int
	// Warm are the models whose weights are warm on the node.
	Warm map[string]bool
}

// Placement is one bound replica, or one bound pod of a gang (Gang names its PodGroup).
type Placement struct {
	Pool, Model, Node, Gang string
	GPUs                    int
}

// Report is what one scheduler's placement measured.
type Report struct {
	Scheduler string
	// Placed replicas (bound); Wanted the replicas created.
	Placed, Wanted int
	// CostPerReplicaHour is the mean $/hour of a placed replica: its node's price times the share
	// of the node's GPUs it holds.
	CostPerReplicaHour float64
	// WarmShare is the share of placed replicas on a node where their model is warm.
	WarmShare float64
	// WarmBound is the most WarmShare any placement of these replicas can reach: per model, the
	// smaller of its placed replicas and the replica slots (GPUs / replica GPUs) of its warm nodes.
	WarmBound float64
	// OnOtherWarm counts replicas placed on a node warm only for other models: GPUs that those
	// models' replicas then cannot get on their warm nodes.
	OnOtherWarm int
	// Collisions counts replicas placed on a node that already holds a replica of their pool
	// (what a preferred pod anti-affinity per node would avoid).
	Collisions int
	// WarmCollisions are the Collisions on a node where the replica's model is warm: the
	// co-location that placing more replicas warm implies when a model is warm on few nodes (a
	// model warm on k nodes with w replicas on them has at least w-k).
	WarmCollisions int
	// ZoneSkew is the largest, over pools, difference between the pool's replica counts in its
	// most and least loaded zone.
	ZoneSkew int
	// SpotRatio is the share of placed replicas on spot nodes.
	SpotRatio float64
	// Locality is the gangs' placement on the network hierarchy (zero without gangs).
	Locality Locality
}

// Measure computes a Report. Placements on nodes not in nodes are an error.
func Measure(scheduler string, wanted int, nodes []Node, ps []Placement) (Report, error) {
	r := Report{Scheduler: scheduler, Wanted: wanted, Placed: len(ps)}
	byName := make(map[string]Node, len(nodes))
	zones := map[string]bool{}
	for _, n := range nodes {
		byName[n.Name] = n
		zones[n.Zone] = true
	}
	perNode := map[[2]string]int{}
	perZone := map[string]map[string]int{}
	var cost float64
	var warm, spot int
	perModel := map[string]int{}
	for _, p := range ps {
		perModel[p.Model]++
		n, ok := byName[p.Node]
		if !ok {
			return r, fmt.Errorf("replica of pool %s placed on %q, not a benchmark node", p.Pool, p.Node)
		}
		if n.GPUs > 0 {
			cost += n.PricePerHour * float64(p.GPUs) / float64(n.GPUs)
		}
		if n.Warm[p.Model] {
			warm++
		} else if len(n.Warm) > 0 {
			r.OnOtherWarm++
		}
		if n.Spot {
			spot++
		}
		k := [2]string{p.Pool, p.Node}
		if perNode[k] > 0 {
			r.Collisions++
			if n.Warm[p.Model] {
				r.WarmCollisions++
			}
		}
		perNode[k]++
		if perZone[p.Pool] == nil {
			perZone[p.Pool] = map[string]int{}
		}
		perZone[p.Pool][n.Zone]++
	}
	if len(ps) > 0 {
		r.WarmBound = float64(warmBound(nodes, ps, perModel)) / float64(len(ps))
		r.CostPerReplicaHour = cost / float64(len(ps))
		r.WarmShare = float64(warm) / float64(len(ps))
		r.SpotRatio = float64(spot) / float64(len(ps))
	}
	r.Locality = measureLocality(byName, ps)
	for _, counts := range perZone {
		lo, hi := -1, 0
		for z := range zones {
			c := counts[z]
			if lo < 0 || c < lo {
				lo = c
			}
			hi = max(hi, c)
		}
		r.ZoneSkew = max(r.ZoneSkew, hi-lo)
	}
	return r, nil
}

// warmBound is the most replicas of ps that can be warm: per model, min(its replicas, the replica
// slots of its warm nodes).
func warmBound(nodes []Node, ps []Placement, perModel map[string]int) int {
	slots := map[string]int{}
	for _, n := range nodes {
		for m := range n.Warm {
			if g := ps[0].GPUs; g > 0 {
				slots[m] += n.GPUs / g
			}
		}
	}
	b := 0
	for m, c := range perModel {
		b += min(c, slots[m])
	}
	return b
}

// Verdict judges the candidate against the baseline: every replica placed by both, cost per
// replica-hour lower, warm share higher, spread kept: zone skew no worse (a skew of 1 is always
// kept) and same-pool collisions off warm nodes (Collisions - WarmCollisions) no worse. The
// collisions on warm nodes are not judged: they are what a higher warm share costs where a model
// is warm on few nodes; Write prints them and the total. Reasons lists each miss. When either
// report has gangs (the gangs scenario), the verdict is LocalityVerdict instead.
func Verdict(base, cand Report) (ok bool, reasons []string) {
	if base.Locality.Gangs > 0 || cand.Locality.Gangs > 0 {
		return LocalityVerdict(base, cand)
	}
	if cand.Placed < cand.Wanted || base.Placed < base.Wanted {
		reasons = append(reasons, fmt.Sprintf("not every replica placed (%s %d/%d, %s %d/%d)", base.Scheduler, base.Placed, base.Wanted, cand.Scheduler, cand.Placed, cand.Wanted))
	}
	if !(cand.CostPerReplicaHour < base.CostPerReplicaHour) {
		reasons = append(reasons, fmt.Sprintf("cost per replica-hour not lower (%.3f vs %.3f)", cand.CostPerReplicaHour, base.CostPerReplicaHour))
	}
	if !(cand.WarmShare > base.WarmShare) {
		reasons = append(reasons, fmt.Sprintf("warm share not higher (%.3f vs %.3f)", cand.WarmShare, base.WarmShare))
	}
	if c, b := cand.Collisions-cand.WarmCollisions, base.Collisions-base.WarmCollisions; c > b {
		reasons = append(reasons, fmt.Sprintf("more same-pool collisions off warm nodes (%d vs %d)", c, b))
	}
	if cand.ZoneSkew > max(base.ZoneSkew, 1) {
		reasons = append(reasons, fmt.Sprintf("zone skew worse (%d vs %d)", cand.ZoneSkew, base.ZoneSkew))
	}
	return len(reasons) == 0, reasons
}

// Write prints both reports side by side and the ratios of the candidate to the baseline.
func Write(w io.Writer, base, cand Report) {
	ratio := func(a, b float64) string {
		if b == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	fmt.Fprintf(w, "%-22s %18s %18s %8s\n", "metric", base.Scheduler, cand.Scheduler, "ratio")
	fmt.Fprintf(w, "%-22s %18s %18s\n", "placed/wanted", fmt.Sprintf("%d/%d", base.Placed, base.Wanted), fmt.Sprintf("%d/%d", cand.Placed, cand.Wanted))
	fmt.Fprintf(w, "%-22s %18.3f %18.3f %8s\n", "$ per replica-hour", base.CostPerReplicaHour, cand.CostPerReplicaHour, ratio(cand.CostPerReplicaHour, base.CostPerReplicaHour))
	fmt.Fprintf(w, "%-22s %17.1f%% %17.1f%% %8s\n", "on warm nodes", 100*base.WarmShare, 100*cand.WarmShare, ratio(cand.WarmShare, base.WarmShare))
	fmt.Fprintf(w, "%-22s %17.1f%% %17.1f%%\n", "  most possible", 100*base.WarmBound, 100*cand.WarmBound)
	fmt.Fprintf(w, "%-22s %18d %18d\n", "  on others' warm", base.OnOtherWarm, cand.OnOtherWarm)
	fmt.Fprintf(w, "%-22s %18d %18d %8s\n", "same-pool collisions", base.Collisions, cand.Collisions, ratio(float64(cand.Collisions), float64(base.Collisions)))
	fmt.Fprintf(w, "%-22s %18d %18d\n", "  on own warm nodes", base.WarmCollisions, cand.WarmCollisions)
	bo, co := base.Collisions-base.WarmCollisions, cand.Collisions-cand.WarmCollisions
	fmt.Fprintf(w, "%-22s %18d %18d %8s\n", "  elsewhere (judged)", bo, co, ratio(float64(co), float64(bo)))
	fmt.Fprintf(w, "%-22s %18d %18d\n", "zone skew (max)", base.ZoneSkew, cand.ZoneSkew)
	fmt.Fprintf(w, "%-22s %17.1f%% %17.1f%% %8s\n", "spot allocation", 100*base.SpotRatio, 100*cand.SpotRatio, ratio(cand.SpotRatio, base.SpotRatio))
	if base.Locality.Gangs > 0 || cand.Locality.Gangs > 0 {
		writeLocality(w, base, cand)
	}
}
