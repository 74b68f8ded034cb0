package affinity

import (
	"hash/fnv"
	"math"
	"sort"
	"strconv"
)

// VirtualNodes is how many points each endpoint has on the ring.
const VirtualNodes = 64

// Ring is a consistent-hash ring over a pool's endpoints. It is immutable; every gateway
// replica builds the same ring from the same endpoint names, so a new session's first choice
// agrees across replicas.
type Ring struct {
	names  []string
	points []uint64
	owner  []int // owner[i] is the index in names of points[i]
}

// NewRing builds the ring of names (pod names).
func NewRing(names []string) *Ring {
	r := &Ring{names: append([]string(nil), names...)}
	type pt struct {
		h uint64
		o int
	}
	pts := make([]pt, 0, len(names)*VirtualNodes)
	for i, n := range names {
		for v := 0; v < VirtualNodes; v++ {
			pts = append(pts, pt{Hash64(n + "#" + strconv.Itoa(v)), i})
		}
	}
	sort.Slice(pts, func(i, j int) bool { return pts[i].h < pts[j].h })
	r.points = make([]uint64, len(pts))
	r.owner = make([]int, len(pts))
	for i, p := range pts {
		r.points[i], r.owner[i] = p.h, p.o
	}
	return r
}

// Names returns the endpoint names the ring was built from.
func (r *Ring) Names() []string { return r.names }

// Walk returns up to limit distinct endpoint indices in the order the ring visits them from
// key's position (clockwise). limit <= 0 means all.
func (r *Ring) Walk(key string, limit int) []int {
	n := len(r.names)
	if n == 0 {
		return nil
	}
	if limit <= 0 || limit > n {
		limit = n
	}
	h := Hash64(key)
	start := sort.Search(len(r.points), func(i int) bool { return r.points[i] >= h })
	out := make([]int, 0, limit)
	seen := make([]bool, n)
	for i := 0; i < len(r.points) && len(out) < limit; i++ {
		o := r.owner[(start+i)%len(r.points)]
		if !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	// Endpoints with no point visited yet (only possible when limit == n) come last, in order.
	for o := 0; len(out) < limit && o < n; o++ {
		if !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	return out
}

// LoadBound is the most in-flight requests an endpoint may have after taking one more, under
// consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam 2018): with total
// requests in flight over n endpoints, ceil((1+eps) * (total+1) / n). At least one endpoint is
// always under it.
func LoadBound(total, n int, eps float64) int {
	if n <= 0 {
		return 0
	}
	return int(math.Ceil((1 + eps) * float64(total+1) / float64(n)))
}

// Hash64 is the ring's hash: 64-bit FNV-1a followed by the splitmix64 finalizer (FNV alone
// spreads similar names poorly).
func Hash64(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
