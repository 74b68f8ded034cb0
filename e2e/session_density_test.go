package e2e

// The session density benchmark (issue "agent sessions", Density): N sessions of which a tenth
// are active at a time, on the local cluster's one node; the pods' resident memory is sampled
// and the checkpoints' disk summed. hack/bench.d/48-session-density.sh runs it; make e2e skips it.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
)

// TestAgentSessionBenchDensity starts N sessions (NEURONETES_BENCH_DENSITY_SESSIONS, default 20)
// of the demo agent with S MiB of state (NEURONETES_BENCH_DENSITY_STATE_MIB, default 128) in
// waves of N/10: each wave's sessions get a turn through the gateway, their state written, and
// are suspended by their 3 s idle timeout before the next wave starts. Then, twice, every session
// gets a turn again in waves of N/10 (resumed from its checkpoint, state checked) and is suspended
// again: the second time from the checkpoint of a resumed session, whose agent runs in the
// container restored into its host pod (the node agent must dump that one, not the host).
// It samples the resident (anonymous) memory of every container on the node (the k8s.io memory
// cgroup) and the node agent's staging in /dev/shm, fails when the peak exceeds twice the state
// of a tenth of the sessions (all of them resident would be N x S), and prints the store's bytes
// and the N this node would hold at this state size (its available memory and free disk).
func TestAgentSessionBenchDensity(t *testing.T) {
	if os.Getenv("NEURONETES_BENCH") != "1" {
		t.Skip("benchmark; set NEURONETES_BENCH=1 (hack/bench.d/48-session-density.sh does)")
	}
	n := benchEnvInt(t, "NEURONETES_BENCH_DENSITY_SESSIONS", 20)
	state := int64(benchEnvInt(t, "NEURONETES_BENCH_DENSITY_STATE_MIB", 128)) << 20
	active := max(1, n/10)
	b := newSessionBench(t, 25*time.Minute, state, 3*time.Second)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var cks v1alpha1.AgentCheckpointList
		if err := b.c.List(context.Background(), &cks, client.InNamespace(b.ns)); err == nil {
			for _, ck := range cks.Items {
				t.Logf("AgentCheckpoint %s: %s %s", ck.Name, ck.Status.Phase, ck.Status.Message)
			}
		}
		var evs corev1.EventList
		if err := b.c.List(context.Background(), &evs, client.InNamespace(b.ns)); err == nil {
			for _, ev := range evs.Items {
				if ev.Type == corev1.EventTypeWarning || strings.Contains(ev.Reason, "Fail") {
					t.Logf("event %s %s %s: %s", ev.InvolvedObject.Name, ev.Type, ev.Reason, ev.Message)
				}
			}
		}
	})
	memAvail := meminfo(t, "MemAvailable")
	base := podRSS(t)
	smp := &rssSampler{}
	go smp.run(b.ctx)
	sums := map[string]stateReply{}
	start := time.Now()
	for pass := range 3 {
		for w := 0; w < n; w += active {
			var names []string
			for i := w; i < min(n, w+active); i++ {
				names = append(names, fmt.Sprintf("d%d", i))
			}
			densityWave(t, b, pass, names, sums)
		}
		t.Logf("pass %d (%s) done after %s", pass, map[int]string{0: "cold starts", 1: "resumes", 2: "resumes of resumed sessions"}[pass], time.Since(start).Round(time.Second))
	}
	// The node agent removes a restored container once its checkpoint is stored
	// (snapshot.ContainerdEngine.Checkpoint): none may be left after the last suspension.
	if removed, err := b.engine.GC(b.ctx); err != nil || len(removed) > 0 {
		t.Errorf("restored containers left in containerd after the last suspension (removed now): %v (%v)", removed, err)
	}
	peak, stage := smp.peaks()
	peak -= base
	storeBytes := dirBytes(t, b.storeDir)
	var sf syscall.Statfs_t
	if err := syscall.Statfs(b.storeDir, &sf); err != nil {
		t.Fatal(err)
	}
	diskFree := int64(sf.Bavail) * sf.Bsize
	perActive := (peak + stage) / int64(active)
	perDisk := storeBytes / int64(n)
	nMem := 10 * (memAvail / max(perActive, 1))
	nDisk := (diskFree + storeBytes) / max(perDisk, 1)
	fmt.Printf("density: %d sessions, %d active at a time, %d MiB state each\n", n, active, state>>20)
	fmt.Printf("density: peak resident memory of the node's containers above the start: %d MiB (all %d sessions resident: %d MiB); peak staging in /dev/shm: %d MiB\n",
		peak>>20, n, int64(n)*state>>20, stage>>20)
	fmt.Printf("density: checkpoint store %d MiB for %d sessions (%d MiB each; the last 2 checkpoints kept, deduplicated)\n", storeBytes>>20, n, perDisk>>20)
	fmt.Printf("density: this node (%d MiB available memory, %d MiB free disk at the store): N = min(10 x %d MiB / %d MiB, %d MiB / %d MiB) = min(%d, %d) = %d sessions of %d MiB state\n",
		memAvail>>20, diskFree>>20, memAvail>>20, perActive>>20, (diskFree+storeBytes)>>20, perDisk>>20, nMem, nDisk, min(nMem, nDisk), state>>20)
	fmt.Printf("session density result: sessions=%d active=%d peak_mib=%d tenth_state_mib=%d store_mib=%d node_n=%d\n",
		n, active, peak>>20, int64(active)*state>>20, storeBytes>>20, min(nMem, nDisk))
	if peak < int64(active)*state/2 {
		t.Errorf("peak resident memory %d MiB is under half the state of the %d active sessions: the k8s.io cgroup does not hold the session pods here, nothing was measured", peak>>20, active)
	}
	if peak > 2*int64(active)*state {
		t.Errorf("peak resident memory %d MiB above twice the state of the %d active sessions (%d MiB)", peak>>20, active, 2*int64(active)*state>>20)
	}
}

// densityWave gives each session of names a turn through the gateway (pass 0: creating it and
// writing its state; later passes: resuming it and checking its state), then waits until all are
// Suspended with no pod.
func densityWave(t *testing.T, b *sessionBench, pass int, names []string, sums map[string]stateReply) {
	t.Helper()
	for _, name := range names {
		if pass == 0 {
			if err := b.c.Create(b.ctx, benchSession(b.ns, name, b.idle)); err != nil {
				t.Fatal(err)
			}
		}
		var r sessionReply
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if r = b.g.sessionChat(t, gatewayAPIKey, name, "turn"); r.status != http.StatusNotFound || time.Now().After(deadline) {
				break
			}
		}
		if r.status != http.StatusOK || r.content == "" {
			t.Fatalf("turn %d of %s: %d %s", pass, name, r.status, r.body)
		}
		var p corev1.Pod
		if err := b.c.Get(b.ctx, types.NamespacedName{Namespace: b.ns, Name: r.header.Get("X-Neuronetes-Pod")}, &p); err != nil {
			t.Fatal(err)
		}
		if pass == 0 {
			sums[name] = agentState(t, http.MethodPost, p.Status.PodIP, fmt.Sprintf("?seed=%d", 7000+len(sums)))
		} else if got := agentState(t, http.MethodGet, p.Status.PodIP, ""); got != sums[name] {
			t.Fatalf("state of %s after its resume %+v, want %+v", name, got, sums[name])
		}
	}
	for _, name := range names {
		Eventually(t, 2*time.Minute, "session "+name+" suspended, no pod", func() (bool, error) {
			var s v1alpha1.AgentSession
			if err := b.c.Get(b.ctx, types.NamespacedName{Namespace: b.ns, Name: name}, &s); err != nil {
				return false, err
			}
			var pods corev1.PodList
			if err := b.c.List(b.ctx, &pods, client.InNamespace(b.ns), client.MatchingLabels{"neuronetes.io/session": name}); err != nil {
				return false, err
			}
			return s.Status.Phase == v1alpha1.SessionSuspended && len(pods.Items) == 0, fmt.Errorf("phase %s, %d pods", s.Status.Phase, len(pods.Items))
		})
	}
}

// rssSampler keeps the peak of podRSS and of the bytes under the staging directory.
type rssSampler struct {
	mu         sync.Mutex
	rss, stage int64
}

func (r *rssSampler) run(ctx context.Context) {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rss, _ := readPodRSS()
		stage := int64(0)
		if ents, err := filepath.Glob("/dev/shm/nn-sbench-*"); err == nil {
			for _, d := range ents {
				stage += dirBytesQuiet(d)
			}
		}
		r.mu.Lock()
		r.rss, r.stage = max(r.rss, rss), max(r.stage, stage)
		r.mu.Unlock()
	}
}

func (r *rssSampler) peaks() (rss, stage int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rss, r.stage
}

// podRSS is the anonymous resident memory of every container of the local cluster's node.
func podRSS(t *testing.T) int64 {
	t.Helper()
	v, err := readPodRSS()
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// readPodRSS reads total_rss of the k8s.io memory cgroup (v1) or anon of the v2 one; 0 while
// the hierarchy exists but containerd has not created k8s.io in it yet (no container ran).
func readPodRSS() (int64, error) {
	for _, c := range []struct{ root, key string }{
		{"/sys/fs/cgroup/memory", "total_rss"},
		{"/sys/fs/cgroup", "anon"},
	} {
		v, err := statValue(filepath.Join(c.root, "k8s.io", "memory.stat"), c.key)
		if err == nil {
			return v, nil
		}
		if _, serr := os.Stat(filepath.Join(c.root, "memory.stat")); serr == nil && errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
	}
	return 0, fmt.Errorf("no memory cgroup hierarchy with k8s.io's total_rss or anon")
}

// statValue reads "key value" from a memory.stat-like file.
func statValue(file, key string) (int64, error) {
	f, err := os.Open(file)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && k == key {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s", file, key)
}

// meminfo returns a /proc/meminfo value in bytes.
func meminfo(t *testing.T, key string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == key {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("/proc/meminfo has no %s", key)
	return 0
}

// dirBytes sums the sizes of the regular files under dir.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	return dirBytesQuiet(dir)
}

func dirBytesQuiet(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
