package vector

import "math"

// dot returns the inner product of equal-length a and b.
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		s0 += a[i]*b[i] + a[i+4]*b[i+4]
		s1 += a[i+1]*b[i+1] + a[i+5]*b[i+5]
		s2 += a[i+2]*b[i+2] + a[i+6]*b[i+6]
		s3 += a[i+3]*b[i+3] + a[i+7]*b[i+7]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return s0 + s1 + s2 + s3
}

func norm(a []float32) float32 { return float32(math.Sqrt(float64(dot(a, a)))) }

// Metric selects how similarity is scored.
type Metric int

const (
	// Cosine ranks by cosine similarity (higher is closer).
	Cosine Metric = iota
	// L2 ranks by Euclidean distance (lower is closer).
	L2
)

// ParseMetric parses "cosine" or "l2" ("" means cosine).
func ParseMetric(s string) (Metric, bool) {
	switch s {
	case "", "cosine":
		return Cosine, true
	case "l2":
		return L2, true
	}
	return 0, false
}

// String returns the metric's name.
func (m Metric) String() string {
	if m == L2 {
		return "l2"
	}
	return "cosine"
}

// score returns a value where lower is closer, from the dot product and the
// norms (and squared norms) of the query and the candidate.
func (m Metric) score(d, qn, qn2, xn float32) float32 {
	if m == L2 {
		return qn2 + xn*xn - 2*d // squared distance
	}
	if qn == 0 || xn == 0 {
		return 1
	}
	return 1 - d/(qn*xn) // cosine distance
}

// Public returns the score reported to callers: cosine similarity, or L2 distance.
func (m Metric) public(s float32) float32 {
	if m == L2 {
		return float32(math.Sqrt(float64(max(s, 0))))
	}
	return 1 - s
}
