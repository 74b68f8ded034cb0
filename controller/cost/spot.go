package cost

import (
	"sort"
	"strings"
)

// SpotCap is the outcome of costConstraints.optimization.spotMaxPrice over a cluster's spot
// capacity.
type SpotCap struct {
	// Cheap are the spot nodes priced at or under the cap; Dear the spot nodes priced above it
	// or not priced at all (a price that is unknown is not known to be under the cap).
	Cheap, Dear []string
	// CheapTypes are the instance types whose spot price in the table is at or under the cap
	// (for nodes that do not exist yet, which an autoscaler such as Karpenter may create).
	CheapTypes []string
}

// SplitSpot sorts the spot nodes of quotes, and the spot entries of the table, by the cap in
// $/hour. Every result is sorted.
func SplitSpot(quotes []NodeQuote, t Table, cap float64) SpotCap {
	var s SpotCap
	for _, q := range quotes {
		if q.Capacity != Spot {
			continue
		}
		if q.Known() && q.PerHour <= cap {
			s.Cheap = append(s.Cheap, q.Name)
		} else {
			s.Dear = append(s.Dear, q.Name)
		}
	}
	for k, v := range t {
		if typ, ok := strings.CutSuffix(k, "."+string(Spot)); ok && v <= cap {
			s.CheapTypes = append(s.CheapTypes, typ)
		}
	}
	sort.Strings(s.Cheap)
	sort.Strings(s.Dear)
	sort.Strings(s.CheapTypes)
	return s
}
