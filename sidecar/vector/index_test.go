package vector

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/neuronetes/neuronetes/sidecar/vector/dataset"
)

// naive is an independent reference: full sort of all scores in float64.
func naive(data map[string][]float32, q []float32, k int, m Metric) []string {
	type sc struct {
		id string
		s  float64
	}
	var all []sc
	for id, v := range data {
		var d, qq, vv, l2 float64
		for i := range v {
			d += float64(q[i]) * float64(v[i])
			qq += float64(q[i]) * float64(q[i])
			vv += float64(v[i]) * float64(v[i])
			l2 += (float64(q[i]) - float64(v[i])) * (float64(q[i]) - float64(v[i]))
		}
		s := l2
		if m == Cosine {
			s = -d / math.Sqrt(qq*vv)
		}
		all = append(all, sc{id, s})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].s < all[j].s })
	out := []string{}
	for _, a := range all[:min(k, len(all))] {
		out = append(out, a.id)
	}
	return out
}

func randVec(rng *rand.Rand, dim int) []float32 {
	v := make([]float32, dim)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

func TestExactMatchesNaive(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		metric Metric
		train  int
	}{
		{"cosine flat", 500, Cosine, 0},
		{"l2 flat", 500, L2, 0},
		{"cosine trained", 3000, Cosine, 1000},
		{"l2 trained", 3000, L2, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			x := New(Options{MinTrain: tc.train, Seed: 3})
			data := map[string][]float32{}
			for i := range tc.n {
				id := fmt.Sprint("v", i)
				data[id] = randVec(rng, 16)
				if _, err := x.Insert(id, data[id], nil); err != nil {
					t.Fatal(err)
				}
			}
			if tc.train > 0 && x.Lists() < 2 {
				t.Fatalf("index not trained: %d lists", x.Lists())
			}
			for range 20 {
				q := randVec(rng, 16)
				got, err := x.Exact(q, 10, tc.metric)
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, r := range got {
					ids = append(ids, r.ID)
				}
				if want := naive(data, q, 10, tc.metric); !slices.Equal(ids, want) {
					t.Fatalf("exact = %v, naive = %v", ids, want)
				}
				for i := 1; i < len(got); i++ {
					if (tc.metric == Cosine && got[i].Score > got[i-1].Score) || (tc.metric == L2 && got[i].Score < got[i-1].Score) {
						t.Fatalf("results not ordered: %v", got)
					}
				}
			}
		})
	}
}

// TestRecallClustered checks IVF recall@10 against exact search on seeded
// clustered data, for both distributions the bench uses (smaller here).
func TestRecallClustered(t *testing.T) {
	for _, tc := range []struct {
		set    *dataset.Set
		metric Metric
		nprobe int
	}{
		{dataset.Clustered(7, 12000, 100, 64, 50, 0.15), L2, 8},
		{dataset.EmbeddingLike(11, 12000, 100, 64, 100, 8), Cosine, 16},
	} {
		t.Run(tc.set.Name, func(t *testing.T) {
			x := New(Options{Seed: 1})
			items := make([]Item, len(tc.set.Data))
			for i, v := range tc.set.Data {
				items[i] = Item{ID: fmt.Sprint(i), Vec: v}
			}
			if err := x.InsertBatch(items); err != nil {
				t.Fatal(err)
			}
			var recall float64
			for _, q := range tc.set.Queries {
				want, _ := x.Exact(q, 10, tc.metric)
				got, err := x.Search(q, 10, tc.metric, tc.nprobe)
				if err != nil {
					t.Fatal(err)
				}
				set := map[string]bool{}
				for _, r := range want {
					set[r.ID] = true
				}
				for _, r := range got {
					if set[r.ID] {
						recall++
					}
				}
			}
			recall /= float64(10 * len(tc.set.Queries))
			t.Logf("%s: %d lists, nprobe %d, recall@10 %.4f", tc.set.Name, x.Lists(), tc.nprobe, recall)
			if recall < 0.95 {
				t.Fatalf("recall@10 = %.4f < 0.95", recall)
			}
			if x.Lists() < 40 {
				t.Fatalf("only %d lists: the search would be near-exhaustive", x.Lists())
			}
		})
	}
}

func TestInsertDeleteErrors(t *testing.T) {
	x := New(Options{})
	if _, err := x.Insert("a", []float32{1, 0, 0}, []byte(`{"t":"a"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Insert("a", []float32{0, 1, 0}, nil); err != nil { // replace
		t.Fatal(err)
	}
	if x.Len() != 1 {
		t.Fatalf("len = %d after replace", x.Len())
	}
	r, _ := x.Search([]float32{0, 1, 0}, 1, Cosine, 0)
	if len(r) != 1 || r[0].ID != "a" || math.Abs(float64(r[0].Score)-1) > 1e-6 {
		t.Fatalf("search after replace = %+v", r)
	}
	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"dim", func() error { _, e := x.Insert("b", []float32{1}, nil); return e }(), ErrDim},
		{"nan", func() error { _, e := x.Insert("b", []float32{1, float32(math.NaN()), 0}, nil); return e }(), ErrInvalid},
		{"empty id", func() error { _, e := x.Insert("", []float32{1, 0, 0}, nil); return e }(), ErrInvalid},
		{"bad k", func() error { _, e := x.Search([]float32{1, 0, 0}, 0, L2, 0); return e }(), ErrInvalid},
		{"query dim", func() error { _, e := x.Search([]float32{1, 0}, 1, L2, 0); return e }(), ErrDim},
		{"delete missing", x.Delete("zz"), ErrNotFound},
	} {
		if !errors.Is(tc.err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if err := x.Delete("a"); err != nil || x.Len() != 0 || x.Bytes() != 0 {
		t.Fatalf("delete: %v, len %d, bytes %d", err, x.Len(), x.Bytes())
	}
}

func TestLRUEvictionUnderBudget(t *testing.T) {
	per := New(Options{Dim: 4}).entrySize("v00", nil)
	x := New(Options{MaxBytes: 10 * per})
	vec := func(i int) []float32 { return []float32{float32(i), 1, 0, 0} }
	for i := range 10 {
		if _, err := x.Insert(fmt.Sprintf("v%02d", i), vec(i), nil); err != nil {
			t.Fatal(err)
		}
	}
	// Use v00 so it becomes most recently used; v01 is then the LRU victim.
	if r, _ := x.Search(vec(0), 1, L2, 0); len(r) != 1 || r[0].ID != "v00" {
		t.Fatalf("search = %+v", r)
	}
	ev, err := x.Insert("v10", vec(10), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ev, []string{"v01"}) {
		t.Fatalf("evicted %v, want [v01]", ev)
	}
	if x.Bytes() > 10*per || x.Len() != 10 {
		t.Fatalf("bytes %d (budget %d), len %d", x.Bytes(), 10*per, x.Len())
	}
}

// TestConcurrentUse runs inserts (with retraining and eviction), searches and
// deletes at once; run with -race. Afterwards the index invariants hold.
func TestConcurrentUse(t *testing.T) {
	x := New(Options{MinTrain: 256, MaxBytes: 1500 * New(Options{Dim: 8}).entrySize("w0-0000", nil), Seed: 1})
	done := make(chan struct{})
	errs := make(chan error, 8)
	for w := range 3 {
		go func() {
			rng := rand.New(rand.NewPCG(uint64(w), 9))
			for i := range 800 {
				id := fmt.Sprintf("w%d-%04d", w, i)
				if _, err := x.Insert(id, randVec(rng, 8), nil); err != nil {
					errs <- err
					return
				}
				if i%5 == 0 {
					_ = x.Delete(id)
				}
			}
			errs <- nil
		}()
	}
	go func() {
		rng := rand.New(rand.NewPCG(7, 7))
		for {
			select {
			case <-done:
				errs <- nil
				return
			default:
			}
			if _, err := x.Search(randVec(rng, 8), 5, L2, 4); err != nil {
				errs <- err
				return
			}
		}
	}()
	for range 3 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	// Invariants: every id found at its location, bytes within budget, LRU complete.
	x.mu.RLock()
	defer x.mu.RUnlock()
	var total int64
	n := 0
	for li, l := range x.lists {
		if len(l.vecs) != len(l.ids)*x.dim {
			t.Fatalf("list %d: %d floats for %d ids", li, len(l.vecs), len(l.ids))
		}
		for p, id := range l.ids {
			if lc := x.locs[id]; int(lc.list) != li || int(lc.pos) != p {
				t.Fatalf("%s at %d/%d, locs says %+v", id, li, p, lc)
			}
			total += x.entrySize(id, l.meta[p])
			n++
		}
	}
	if n != len(x.locs) || total != x.bytes || x.bytes > x.opts.MaxBytes || x.lru.Len() != n {
		t.Fatalf("n %d locs %d bytes %d/%d budget %d lru %d", n, len(x.locs), total, x.bytes, x.opts.MaxBytes, x.lru.Len())
	}
}
