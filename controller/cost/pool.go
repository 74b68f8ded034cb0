package cost

// Rate is what a pool spends per hour now.
type Rate struct {
	// PerHour is the pool's $/hour.
	PerHour float64
	// Pods counts the pods priced (serving and warm); Unpriced those charged 0 for want of a price.
	Pods, Unpriced int32
}

// PerPod is the mean $/hour of one priced pod (0 when none is priced).
func (r Rate) PerPod() float64 {
	if n := r.Pods - r.Unpriced; n > 0 {
		return r.PerHour / float64(n)
	}
	return 0
}

// PoolRate prices a pool's pods. podNodes holds each pod's node name ("" when not scheduled);
// nodes the prices of those nodes. A pod is charged its node's price split evenly among the
// pool's pods on that node (a node shared with other workloads is charged wholly to this pool's
// pods on it); a pod whose node has no price, or that is not scheduled yet, is charged
// classPrice (the AgentClass costPerReplicaHour); with classPrice 0 it is counted Unpriced.
func PoolRate(podNodes []string, nodes map[string]NodePrice, classPrice float64) Rate {
	perNode := map[string]int{}
	for _, n := range podNodes {
		if n != "" && nodes[n].Known() {
			perNode[n]++
		}
	}
	r := Rate{Pods: int32(len(podNodes))}
	for _, n := range podNodes {
		switch {
		case perNode[n] > 0:
			r.PerHour += nodes[n].PerHour / float64(perNode[n])
		case classPrice > 0:
			r.PerHour += classPrice
		default:
			r.Unpriced++
		}
	}
	return r
}
