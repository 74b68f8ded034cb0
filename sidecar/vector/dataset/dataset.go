// Package dataset generates seeded synthetic vector sets for recall tests
// and benchmarks of the vector shard.
package dataset

import (
	"math"
	"math/rand/v2"
)

// Set is n vectors of dimension Dim stored row-major, plus queries.
type Set struct {
	Name    string
	Dim     int
	Data    [][]float32
	Queries [][]float32
}

// Clustered draws n points around c isotropic Gaussian centres (uniform in
// [-1,1]^dim, per-axis sigma), and q queries the same way.
func Clustered(seed uint64, n, q, dim, c int, sigma float64) *Set {
	rng := rand.New(rand.NewPCG(seed, 1))
	centres := make([][]float32, c)
	for i := range centres {
		centres[i] = make([]float32, dim)
		for j := range dim {
			centres[i][j] = float32(rng.Float64()*2 - 1)
		}
	}
	gen := func() []float32 {
		ctr := centres[rng.IntN(c)]
		v := make([]float32, dim)
		for j := range dim {
			v[j] = ctr[j] + float32(rng.NormFloat64()*sigma)
		}
		return v
	}
	s := &Set{Name: "clustered", Dim: dim}
	for range n {
		s.Data = append(s.Data, gen())
	}
	for range q {
		s.Queries = append(s.Queries, gen())
	}
	return s
}

// EmbeddingLike mimics text embeddings: unit-norm vectors from c clusters
// with Zipf-distributed sizes, each cluster an anisotropic Gaussian in a
// random low-rank (rank r) subspace plus small isotropic noise, sharing a
// common mean direction (embeddings are not centred). Use with cosine.
func EmbeddingLike(seed uint64, n, q, dim, c, r int) *Set {
	rng := rand.New(rand.NewPCG(seed, 2))
	mean := make([]float64, dim)
	for j := range mean {
		mean[j] = rng.NormFloat64() * 0.5
	}
	type cluster struct {
		centre []float64
		basis  [][]float64
		scale  []float64
	}
	cls := make([]cluster, c)
	for i := range cls {
		cl := cluster{centre: make([]float64, dim)}
		for j := range dim {
			cl.centre[j] = mean[j] + rng.NormFloat64()
		}
		for k := range r {
			b := make([]float64, dim)
			for j := range dim {
				b[j] = rng.NormFloat64() / math.Sqrt(float64(dim))
			}
			cl.basis = append(cl.basis, b)
			cl.scale = append(cl.scale, 2.5/float64(k+1))
		}
		cls[i] = cl
	}
	zipf := rand.NewZipf(rng, 1.2, 1, uint64(c-1))
	gen := func() []float32 {
		cl := cls[zipf.Uint64()]
		v := make([]float64, dim)
		copy(v, cl.centre)
		for k, b := range cl.basis {
			a := rng.NormFloat64() * cl.scale[k]
			for j := range dim {
				v[j] += a * b[j] * math.Sqrt(float64(dim))
			}
		}
		var nn float64
		for j := range dim {
			v[j] += rng.NormFloat64() * 0.3
			nn += v[j] * v[j]
		}
		out := make([]float32, dim)
		for j := range dim {
			out[j] = float32(v[j] / math.Sqrt(nn))
		}
		return out
	}
	s := &Set{Name: "embedding-like", Dim: dim}
	for range n {
		s.Data = append(s.Data, gen())
	}
	for range q {
		s.Queries = append(s.Queries, gen())
	}
	return s
}
