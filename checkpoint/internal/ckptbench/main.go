// Command ckptbench measures checkpoint/restore against baselines taken in
// the same run and prints medians and ratios (run by hack/bench.d/50-checkpoint.sh):
//
//   - dump+restore of a process with a large RSS through the library vs the
//     criu CLI on the same kind of process (target <= 1.1x);
//   - bytes newly stored by a re-checkpoint of an unchanged process vs its
//     full size (target < 5%);
//   - restore-to-ready from the store vs a cold start that loads the weights
//     from disk and builds its state (target <= 0.3x).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/checkpoint"
	"github.com/neuronetes/neuronetes/checkpoint/criu"
	"github.com/neuronetes/neuronetes/checkpoint/internal/stateproc"
	"github.com/neuronetes/neuronetes/checkpoint/store"
)

func main() {
	stateproc.MaybeRun()
	mib := flag.Int("mib", 1024, "weights size in MiB (the process RSS)")
	reps := flag.Int("reps", 3, "repetitions per measurement")
	work := flag.String("work", "", "work directory (default: a temp dir)")
	only := flag.String("only", "", "run one measurement: dump, recheckpoint or restore")
	flag.Parse()
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	if err := run(*mib, *reps, *work, *only); err != nil {
		fmt.Fprintln(os.Stderr, "ckptbench:", err)
		os.Exit(1)
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

func run(mib, reps int, work, only string) error {
	ctx := context.Background()
	path, err := criu.Locate()
	if err != nil {
		return err
	}
	if err := criu.Check(ctx, path); err != nil {
		fmt.Printf("SKIP checkpoint benchmarks: %v\n", err)
		return nil
	}
	// Become a subreaper so processes restored detached by the CLI are ours to reap.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("subreaper: %w", err)
	}
	if work == "" {
		if work, err = os.MkdirTemp("", "ckptbench-"); err != nil {
			return err
		}
		defer os.RemoveAll(work)
	}
	c := &criu.Client{Path: path}
	fmt.Printf("checkpoint benchmarks: %d MiB process, %d reps, criu %s, work %s\n", mib, reps, path, work)

	fmt.Printf("%-44s %12s %12s %8s %s\n", "measurement", "median", "baseline", "ratio", "target")
	if only == "" || only == "dump" {
		if err := dumpVsCLI(ctx, c, path, work, mib, reps); err != nil {
			return err
		}
	}
	if only == "" || only == "recheckpoint" {
		ratios, err := reCheckpoint(ctx, c, work, mib, reps)
		if err != nil {
			return fmt.Errorf("re-checkpoint: %w", err)
		}
		slices.Sort(ratios)
		fmt.Printf("%-44s %12s %12s %8.4f %s\n", "re-checkpoint unchanged: new bytes / full", fmt.Sprintf("%.2f%%", 100*ratios[len(ratios)/2]), "100%", ratios[len(ratios)/2], "< 0.05")
	}
	if only == "" || only == "restore" {
		res, err := restoreVsCold(ctx, c, work, mib, reps)
		if err != nil {
			return fmt.Errorf("restore vs cold: %w", err)
		}
		cold := median(res.cold)
		for _, row := range []struct {
			name string
			d    []time.Duration
		}{
			{"restore-to-ready vs cold start (eager)", res.eager},
			{"restore-to-ready vs cold start (lazy pages)", res.lazy},
			{"  lazy: all pages in place vs cold start", res.lazyAll},
		} {
			fmt.Printf("%-44s %12v %12v %8.3f %s\n", row.name, median(row.d).Round(time.Millisecond), cold.Round(time.Millisecond), float64(median(row.d))/float64(cold), "<= 0.3")
		}
	}
	return nil
}

func dumpVsCLI(ctx context.Context, c *criu.Client, path, work string, mib, reps int) error {
	var lib, cli []time.Duration
	for i := 0; i < reps; i++ {
		// Alternate which side goes first so load drift hits both alike.
		for _, lib1st := range [][]bool{{true, false}, {false, true}}[i%2] {
			if lib1st {
				d, err := libDumpRestore(ctx, c, work, mib)
				if err != nil {
					return fmt.Errorf("library rep %d: %w", i, err)
				}
				lib = append(lib, d)
				continue
			}
			d, err := cliDumpRestore(path, work, mib)
			if err != nil {
				return fmt.Errorf("cli rep %d: %w", i, err)
			}
			cli = append(cli, d)
		}
	}
	r1 := float64(median(lib)) / float64(median(cli))
	fmt.Printf("%-44s %12v %12v %8.3f %s\n", "dump+restore: library vs criu CLI", median(lib).Round(time.Millisecond), median(cli).Round(time.Millisecond), r1, "<= 1.1")
	return nil
}

func freshDir(work, name string) (string, error) {
	d := filepath.Join(work, name)
	if err := os.RemoveAll(d); err != nil {
		return "", err
	}
	return d, os.MkdirAll(filepath.Join(d, "images"), 0o755)
}

// libDumpRestore times Dump (kill) + Restore through go-criu.
func libDumpRestore(ctx context.Context, c *criu.Client, work string, mib int) (time.Duration, error) {
	dir, err := freshDir(work, "lib")
	if err != nil {
		return 0, err
	}
	cmd, err := stateproc.Start(dir, mib, "")
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := c.Dump(ctx, cmd.Process.Pid, filepath.Join(dir, "images"), criu.DumpOptions{}); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return 0, err
	}
	dump := time.Since(start)
	_ = cmd.Wait()
	start = time.Now()
	r, err := c.Restore(ctx, filepath.Join(dir, "images"), criu.RestoreOptions{})
	if err != nil {
		return 0, err
	}
	d := dump + time.Since(start)
	return d, r.Kill()
}

// cliDumpRestore times `criu dump` + `criu restore -d` on the same kind of process.
func cliDumpRestore(path, work string, mib int) (time.Duration, error) {
	dir, err := freshDir(work, "cli")
	if err != nil {
		return 0, err
	}
	cmd, err := stateproc.Start(dir, mib, "")
	if err != nil {
		return 0, err
	}
	pid := cmd.Process.Pid
	images := filepath.Join(dir, "images")
	start := time.Now()
	if out, err := exec.Command(path, "dump", "-t", fmt.Sprint(pid), "-D", images, "-o", "../dump.log").CombinedOutput(); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return 0, fmt.Errorf("criu dump: %v: %s", err, out)
	}
	dump := time.Since(start)
	_ = cmd.Wait()
	start = time.Now()
	if out, err := exec.Command(path, "restore", "-d", "-D", images, "-o", "../restore.log").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("criu restore: %v: %s", err, out)
	}
	d := dump + time.Since(start)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	var ws syscall.WaitStatus
	_, _ = syscall.Wait4(pid, &ws, 0, nil) // we are its subreaper
	return d, nil
}

// reCheckpoint stores a full checkpoint of a running process, then
// re-checkpoints it unchanged and returns new bytes / total per re-checkpoint.
func reCheckpoint(ctx context.Context, c *criu.Client, work string, mib, reps int) ([]float64, error) {
	dir, err := freshDir(work, "re")
	if err != nil {
		return nil, err
	}
	d, err := store.NewDir(filepath.Join(dir, "store"))
	if err != nil {
		return nil, err
	}
	st, err := store.New(d, store.Options{})
	if err != nil {
		return nil, err
	}
	m := &checkpoint.Manager{CRIU: c, Store: st, WorkDir: dir}
	cmd, err := stateproc.Start(dir, mib, "")
	if err != nil {
		return nil, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var out []float64
	for i := 0; i <= reps; i++ {
		man, err := m.Checkpoint(ctx, checkpoint.CheckpointRequest{Pid: cmd.Process.Pid, Agent: "bench", ID: fmt.Sprint("ck", i), LeaveRunning: true})
		if err != nil {
			return nil, err
		}
		if i > 0 {
			out = append(out, float64(man.NewBytes)/float64(man.TotalBytes))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return out, nil
}

// restoreVsCold times a cold start (read weights file, build state, ready)
// against restoring a stored checkpoint of the ready process.
// restoreResult holds restore-to-ready and cold-start durations.
type restoreResult struct {
	eager, lazy, lazyAll, cold []time.Duration
}

func restoreVsCold(ctx context.Context, c *criu.Client, work string, mib, reps int) (*restoreResult, error) {
	dir, err := freshDir(work, "cold")
	if err != nil {
		return nil, err
	}
	weights := filepath.Join(dir, "weights.bin")
	buf := make([]byte, mib<<20)
	stateproc.FillWeights(buf)
	if err := os.WriteFile(weights, buf, 0o644); err != nil {
		return nil, err
	}
	buf = nil
	d, err := store.NewDir(filepath.Join(dir, "store"))
	if err != nil {
		return nil, err
	}
	st, err := store.New(d, store.Options{})
	if err != nil {
		return nil, err
	}
	m := &checkpoint.Manager{CRIU: c, Store: st, WorkDir: dir}
	var cold []time.Duration
	// Each cold start has its own state dir: the checkpointed process's
	// files (rep 0) must stay as they were at the dump for CRIU's restore.
	procDir := filepath.Join(dir, "rep0")
	for i := 0; i < reps; i++ {
		rdir := filepath.Join(dir, fmt.Sprint("rep", i))
		if err := os.MkdirAll(rdir, 0o755); err != nil {
			return nil, err
		}
		start := time.Now()
		cmd, err := stateproc.Start(rdir, mib, weights) // returns once ready
		if err != nil {
			return nil, err
		}
		cold = append(cold, time.Since(start))
		if i == 0 {
			if _, err := m.Checkpoint(ctx, checkpoint.CheckpointRequest{Pid: cmd.Process.Pid, Agent: "bench", ID: "ready"}); err != nil {
				return nil, err
			}
		} else {
			_ = cmd.Process.Kill()
		}
		_ = cmd.Wait()
	}
	res := &restoreResult{cold: cold}
	var fetch, crRestore []time.Duration
	for i := 0; i < 2*reps; i++ {
		lazy := i%2 == 1
		// The same steps as Manager.Restore, timed separately.
		rdir, err := freshDir(work, "restore")
		if err != nil {
			return nil, err
		}
		before, _ := stateproc.ReadState(procDir, "state")
		start := time.Now()
		if _, err := st.Get(ctx, "bench", "ready", filepath.Join(rdir, "images"), nil); err != nil {
			return nil, err
		}
		fetched := time.Now()
		r, err := c.Restore(ctx, filepath.Join(rdir, "images"), criu.RestoreOptions{LogDir: rdir, LazyPages: lazy})
		if err != nil {
			return nil, err
		}
		restored := time.Now()
		// Ready = the restored process ticks again from its saved state.
		for {
			s, err := stateproc.ReadState(procDir, "state")
			if err == nil && s.Counter > before.Counter {
				break
			}
			time.Sleep(time.Millisecond)
		}
		ready := time.Since(start)
		if lazy {
			res.lazy = append(res.lazy, ready)
			<-r.LazyDone()
			res.lazyAll = append(res.lazyAll, time.Since(start))
		} else {
			res.eager = append(res.eager, ready)
			fetch, crRestore = append(fetch, fetched.Sub(start)), append(crRestore, restored.Sub(fetched))
		}
		_ = r.Kill()
	}
	fmt.Printf("  eager restore breakdown (median): fetch+verify %v, criu restore %v\n", median(fetch).Round(time.Millisecond), median(crRestore).Round(time.Millisecond))
	return res, nil
}
