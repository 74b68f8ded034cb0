package scale

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// placeMix schedules every pod of mix on the simulated nodes with the scheduler's own allocator, in
// phase order, and returns the allocated claims per node (labelled with their kind, as in a run).
func placeMix(t testing.TB, s *FilterSim, mix Mix) map[string][]resourceapi.ResourceClaim {
	t.Helper()
	ctx := context.Background()
	used := map[string]int{}
	byNode := map[string][]resourceapi.ResourceClaim{}
	for _, k := range Kinds {
		for i := 0; i < mix[k]; i++ {
			node, res, err := s.Place(ctx, k, used)
			if err != nil {
				t.Fatal(err)
			}
			if node == "" {
				t.Fatalf("layout %s: pod %d of kind %s does not fit anywhere", s.layout.Name, i, k)
			}
			byNode[node] = append(byNode[node], resourceapi.ResourceClaim{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", k, i), Labels: map[string]string{"kind": string(k)}},
				Status:     resourceapi.ResourceClaimStatus{Allocation: &res},
			})
		}
	}
	return byNode
}

// TestFilterSimPlacesMix schedules a full mix with the real DRA allocator on every layout: every pod
// fits, and every node's allocations pass the benchmark's checks against the published slices
// (counters, pairs, types) and against the driver's full device model.
func TestFilterSimPlacesMix(t *testing.T) {
	ctx := context.Background()
	const nodes = 16 // 128 GPUs; the mix needs 110 in the baseline
	mix := DefaultMix(100)
	for _, name := range []string{LayoutWhole, LayoutMIGSelected, LayoutMIGAll, LayoutMIGMixed, LayoutNVIDIA} {
		t.Run(name, func(t *testing.T) {
			layout, err := LayoutByName(name)
			if err != nil {
				t.Fatal(err)
			}
			s, err := NewFilterSim(ctx, nodes, layout)
			if err != nil {
				t.Fatal(err)
			}
			byNode := placeMix(t, s, mix)
			claims := 0
			for _, node := range s.Nodes() {
				var sl []resourceapi.ResourceSlice
				for _, o := range s.slices {
					if *o.Spec.NodeName == node.Name {
						sl = append(sl, *o)
					}
				}
				gpus, err := Inventory(ctx, "dgxh100", node.Name)
				if err != nil {
					t.Fatal(err)
				}
				cl := byNode[node.Name]
				claims += len(cl)
				for _, p := range append(CheckNode(node.Name, sl, cl, layout.MIG), CheckModel(node.Name, gpus, layout.Options, cl)...) {
					t.Error(p)
				}
			}
			if claims != mix.Total() {
				t.Errorf("%d claims allocated, want %d", claims, mix.Total())
			}
		})
	}
}

// BenchmarkFilter measures one Filter call (one pod, one node) of the scheduler's own allocator
// per layout and pod kind, on nodes where most of a default mix is already allocated (run with
// -benchtime=200x or more; GOMAXPROCS=1 is closest to the scheduler's one-pod-at-a-time loop).
func BenchmarkFilter(b *testing.B) {
	ctx := context.Background()
	for _, name := range []string{LayoutWhole, LayoutMIGSelected, LayoutMIGMixed, LayoutNVIDIA} {
		layout, err := LayoutByName(name)
		if err != nil {
			b.Fatal(err)
		}
		s, err := NewFilterSim(ctx, 16, layout)
		if err != nil {
			b.Fatal(err)
		}
		placeMix(b, s, DefaultMix(80))
		for _, k := range Kinds {
			b.Run(name+"/"+string(k), func(b *testing.B) {
				cpu0 := processCPU()
				for i := 0; i < b.N; i++ {
					if _, _, err := s.Filter(ctx, k); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(s.Nodes())), "ns/node")
				b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N*len(s.Nodes())), "cpu-ns/node")
			})
		}
	}
}

// processCPU returns the CPU time (user and system, all threads, GC included) the process used so
// far: less disturbed by other load on the machine than wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
