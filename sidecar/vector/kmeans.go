package vector

import (
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
)

// kmeansIters is the number of Lloyd iterations per training.
const kmeansIters = 12

// parallel runs fn over [0,n) split into one chunk per CPU.
func parallel(n int, fn func(worker, lo, hi int)) {
	w := max(1, min(runtime.GOMAXPROCS(0), n/256))
	var wg sync.WaitGroup
	for i := range w {
		lo, hi := i*n/w, (i+1)*n/w
		wg.Go(func() { fn(i, lo, hi) })
	}
	wg.Wait()
}

// nearestIn returns the index of the nearest of k centroids (L2) to v.
func nearestIn(v []float32, cents, cn2 []float32, dim int) int {
	best, bestD := 0, float32(math.MaxFloat32)
	for c := range len(cn2) {
		d := cn2[c] - 2*dot(v, cents[c*dim:(c+1)*dim])
		if d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// kmeans clusters the rows of data (n x dim) into k centroids with Lloyd's
// algorithm from a seeded random initialisation; empty clusters are
// re-seeded from random points.
func kmeans(data []float32, dim, k int, rng *rand.Rand) []float32 {
	n := len(data) / dim
	cents := make([]float32, k*dim)
	for c, p := range rng.Perm(n)[:k] {
		copy(cents[c*dim:(c+1)*dim], data[p*dim:(p+1)*dim])
	}
	assign := make([]int32, n)
	cn2 := make([]float32, k)
	workers := runtime.GOMAXPROCS(0)
	for range kmeansIters {
		for c := range k {
			cv := cents[c*dim : (c+1)*dim]
			cn2[c] = dot(cv, cv)
		}
		sums := make([][]float64, workers)
		counts := make([][]int, workers)
		parallel(n, func(w, lo, hi int) {
			s, cnt := make([]float64, k*dim), make([]int, k)
			for i := lo; i < hi; i++ {
				v := data[i*dim : (i+1)*dim]
				c := nearestIn(v, cents, cn2, dim)
				assign[i] = int32(c)
				cnt[c]++
				for j, f := range v {
					s[c*dim+j] += float64(f)
				}
			}
			sums[w], counts[w] = s, cnt
		})
		for c := range k {
			total := 0
			for w := range workers {
				if counts[w] != nil {
					total += counts[w][c]
				}
			}
			cv := cents[c*dim : (c+1)*dim]
			if total == 0 {
				p := rng.IntN(n)
				copy(cv, data[p*dim:(p+1)*dim])
				continue
			}
			for j := range dim {
				var s float64
				for w := range workers {
					if sums[w] != nil {
						s += sums[w][c*dim+j]
					}
				}
				cv[j] = float32(s / float64(total))
			}
		}
	}
	return cents
}

// trainLocked clusters all vectors into nlist lists and reassigns every
// vector to its nearest centroid. Caller holds x.mu for writing.
func (x *Index) trainLocked() {
	n := len(x.locs)
	nlist := max(int(math.Sqrt(float64(n))), n/x.opts.ListSize)
	nlist = max(1, min(nlist, n/8))
	// Flatten all entries.
	all := make([]float32, 0, n*x.dim)
	ids := make([]string, 0, n)
	metas := make([][]byte, 0, n)
	norms := make([]float32, 0, n)
	for _, l := range x.lists {
		all = append(all, l.vecs...)
		ids = append(ids, l.ids...)
		metas = append(metas, l.meta...)
		norms = append(norms, l.norms...)
	}
	rng := rand.New(rand.NewPCG(x.opts.Seed, uint64(n)))
	sampleN := min(n, 64*nlist)
	sample := all
	if sampleN < n {
		sample = make([]float32, 0, sampleN*x.dim)
		for _, p := range rng.Perm(n)[:sampleN] {
			sample = append(sample, all[p*x.dim:(p+1)*x.dim]...)
		}
	}
	cents := kmeans(sample, x.dim, nlist, rng)
	cn2 := make([]float32, nlist)
	cnorm := make([]float32, nlist)
	for c := range nlist {
		cv := cents[c*x.dim : (c+1)*x.dim]
		cn2[c] = dot(cv, cv)
		cnorm[c] = float32(math.Sqrt(float64(cn2[c])))
	}
	assign := make([]int32, n)
	parallel(n, func(_, lo, hi int) {
		for i := lo; i < hi; i++ {
			assign[i] = int32(nearestIn(all[i*x.dim:(i+1)*x.dim], cents, cn2, x.dim))
		}
	})
	lists := make([]*ivfList, nlist)
	for c := range lists {
		lists[c] = &ivfList{}
	}
	for i, c := range assign {
		l := lists[c]
		l.ids = append(l.ids, ids[i])
		l.vecs = append(l.vecs, all[i*x.dim:(i+1)*x.dim]...)
		l.norms = append(l.norms, norms[i])
		l.meta = append(l.meta, metas[i])
		x.locs[ids[i]] = loc{c, int32(len(l.ids) - 1)}
	}
	x.lists, x.centroids, x.cnorms, x.cn2, x.trainedAt = lists, cents, cnorm, cn2, n
}
