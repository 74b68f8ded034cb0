// Command ckptbench measures checkpoint/restore against baselines taken in
// the same run and prints medians and ratios (run by hack/bench.d/50-checkpoint.sh):
//
//   - dump+restore of a process with a large RSS through the library vs the
//     criu CLI on the same kind of process, in interleaved pairs (target <= 1.1x);
//   - bytes newly stored by a re-checkpoint of an unchanged process vs its
//     full size (target < 5%);
//   - restore-to-ready from the store vs a cold start of the same agent that
//     loads its weights from a page-cached file and builds its state (target
//     <= 0.3x), for weights read into anonymous memory (the old variant) and
//     for weights mapped from the file (the new one).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/checkpoint"
	"github.com/neuronetes/neuronetes/checkpoint/criu"
	"github.com/neuronetes/neuronetes/checkpoint/internal/stateproc"
	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// config is the command line.
type config struct {
	mib, reps, dumpReps, stateMiB int
	work, weightsDir, only        string
}

func main() {
	stateproc.MaybeRun()
	var cfg config
	flag.IntVar(&cfg.mib, "mib", 1024, "weights size in MiB (the process RSS)")
	flag.IntVar(&cfg.reps, "reps", 3, "repetitions per re-checkpoint and restore measurement")
	flag.IntVar(&cfg.dumpReps, "dump-reps", 7, "library/CLI pairs for the dump+restore comparison")
	flag.IntVar(&cfg.stateMiB, "state-mib", 64, "anonymous state the agent builds from its weights, in MiB")
	flag.StringVar(&cfg.work, "work", "", "work directory for images and stores (default: a temp dir)")
	flag.StringVar(&cfg.weightsDir, "weights-dir", os.TempDir(), "directory of the weights file (the node's model cache: a disk, page-cached)")
	flag.StringVar(&cfg.only, "only", "", "run one measurement: dump, recheckpoint or restore")
	flag.Parse()
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	err := run(cfg)
	switch {
	case errors.Is(err, errNotMeasured):
		os.Exit(2)
	case errors.Is(err, errMissed):
		os.Exit(1)
	case err != nil:
		fmt.Fprintln(os.Stderr, "ckptbench:", err)
		fmt.Printf("verdict: NOT MEASURED: %v\n", err)
		os.Exit(2)
	}
}

// Outcomes of run beyond its table: a target missed, or nothing measured
// (the verdict line says which, last).
var (
	errMissed      = errors.New("a target was missed")
	errNotMeasured = errors.New("not measured")
)

// judgment is one judged row: ratio against its limit (strictly below it
// when strict).
type judgment struct {
	name         string
	ratio, limit float64
	strict, ok   bool
}

// judged collects the rows the verdict covers, in order.
var judged []judgment

// judge records a judged row.
func judge(name string, ratio, limit float64, strict bool) {
	ok := ratio <= limit
	if strict {
		ok = ratio < limit
	}
	judged = append(judged, judgment{name, ratio, limit, strict, ok})
}

// verdict prints the verdict line (last) and returns errMissed when a
// judged row missed its target.
func verdict() error {
	var missed, met []string
	for _, j := range judged {
		op := "<="
		if j.strict {
			op = "<"
		}
		s := fmt.Sprintf("%s %.3f %s %.2f", j.name, j.ratio, op, j.limit)
		if j.ok {
			met = append(met, s)
		} else {
			missed = append(missed, s)
		}
	}
	if len(missed) > 0 {
		fmt.Printf("verdict: NOT MET: %s (met: %s)\n", strings.Join(missed, "; "), strings.Join(met, "; "))
		return errMissed
	}
	fmt.Printf("verdict: MET: %s\n", strings.Join(met, "; "))
	return nil
}

func median[T int64 | float64 | time.Duration](d []T) T {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// row prints one line of the result table.
func row(name string, v, base any, ratio float64, target string) {
	fmt.Printf("%-58s %12v %12v %8.3f %s\n", name, v, base, ratio, target)
}

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func run(cfg config) error {
	ctx := context.Background()
	path, err := criu.Locate()
	if err != nil {
		return err
	}
	if err := criu.Check(ctx, path); err != nil {
		fmt.Printf("verdict: NOT MEASURED: criu check fails here: %v\n", err)
		return errNotMeasured
	}
	// Become a subreaper so processes restored detached by the CLI are ours to reap.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("subreaper: %w", err)
	}
	if cfg.work == "" {
		if cfg.work, err = os.MkdirTemp("", "ckptbench-"); err != nil {
			return err
		}
		defer os.RemoveAll(cfg.work)
	}
	c := &criu.Client{Path: path}
	fmt.Printf("checkpoint benchmarks: %d MiB weights, %d MiB agent state, %d reps (%d dump pairs), criu %s, work %s\n",
		cfg.mib, cfg.stateMiB, cfg.reps, cfg.dumpReps, path, cfg.work)
	fmt.Printf("%-58s %12s %12s %8s %s\n", "measurement", "median", "baseline", "ratio", "target")
	if cfg.only == "" || cfg.only == "dump" {
		if err := dumpVsCLI(ctx, c, path, cfg.work, cfg.mib, cfg.dumpReps); err != nil {
			return err
		}
	}
	if cfg.only == "" || cfg.only == "recheckpoint" {
		ratios, err := reCheckpoint(ctx, c, cfg.work, cfg.mib, cfg.reps)
		if err != nil {
			return fmt.Errorf("re-checkpoint: %w", err)
		}
		r := median(ratios)
		row("re-checkpoint unchanged: new bytes / full", fmt.Sprintf("%.2f%%", 100*r), "100%", r, "< 0.05")
		judge("re-checkpoint new bytes", r, 0.05, true)
	}
	if cfg.only == "" || cfg.only == "restore" {
		if err := restoreVsCold(ctx, c, cfg); err != nil {
			return fmt.Errorf("restore vs cold: %w", err)
		}
	}
	return verdict()
}

func freshDir(work, name string) (string, error) {
	d := filepath.Join(work, name)
	if err := os.RemoveAll(d); err != nil {
		return "", err
	}
	return d, os.MkdirAll(filepath.Join(d, "images"), 0o755)
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
	st, err := store.New(d, store.Options{Signer: benchSigner()})
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
		man, err := m.Checkpoint(ctx, checkpoint.CheckpointRequest{Pid: cmd.Process.Pid, Key: benchKey, ID: fmt.Sprint("ck", i), LeaveRunning: true})
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
