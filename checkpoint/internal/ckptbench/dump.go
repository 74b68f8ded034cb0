package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/neuronetes/neuronetes/checkpoint/criu"
	"github.com/neuronetes/neuronetes/checkpoint/internal/stateproc"
)

// dumpVsCLI dumps and restores one process back and forth, alternately
// through the library and through the criu CLI, so both sides handle the
// same 1 GiB process and no time goes to starting fresh helpers. The order
// inside a pair alternates (ABBA...), so a load change on this shared
// machine hits both sides alike; each pair's ratio compares runs seconds
// apart, and the median of the pair ratios is the robust figure (the ratio
// of the two medians and the pair ratios' range are printed too).
func dumpVsCLI(ctx context.Context, c *criu.Client, path, work string, mib, pairs int) error {
	dir, err := freshDir(work, "dump")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	cmd, err := stateproc.Start(dir, mib, "")
	if err != nil {
		return err
	}
	pid := cmd.Process.Pid
	// reap waits for the current incarnation of pid once a dump ended it.
	reap := func() error { _ = cmd.Wait(); return nil }
	defer func() { _ = syscall.Kill(pid, syscall.SIGKILL); _ = reap() }()
	images := filepath.Join(dir, "images")
	var lib, cli, libCPU, cliCPU []time.Duration
	var ratios, cpuRatios []float64
	for i := 0; i < pairs; i++ {
		var l, k sample
		for _, lib1st := range [][]bool{{true, false}, {false, true}}[i%2] {
			if err := os.RemoveAll(images); err != nil {
				return err
			}
			if err := os.Mkdir(images, 0o755); err != nil {
				return err
			}
			if lib1st {
				if l, reap, err = libDumpRestore(ctx, c, pid, images, reap); err != nil {
					return fmt.Errorf("library pair %d: %w", i, err)
				}
				continue
			}
			if k, reap, err = cliDumpRestore(path, pid, images, reap); err != nil {
				return fmt.Errorf("cli pair %d: %w", i, err)
			}
		}
		lib, cli, ratios = append(lib, l.wall), append(cli, k.wall), append(ratios, float64(l.wall)/float64(k.wall))
		libCPU, cliCPU, cpuRatios = append(libCPU, l.cpu), append(cliCPU, k.cpu), append(cpuRatios, float64(l.cpu)/float64(k.cpu))
	}
	fmt.Printf("  dump+restore pairs (library/CLI):")
	for i := range lib {
		fmt.Printf(" %v/%v", ms(lib[i]), ms(cli[i]))
	}
	fmt.Printf("; pair ratios %.2f..%.2f\n", slices.Min(ratios), slices.Max(ratios))
	row(fmt.Sprintf("dump+restore: library vs criu CLI (median of %d pairs)", pairs), ms(median(lib)), ms(median(cli)), median(ratios), "<= 1.1")
	judge("dump+restore library/CLI", median(ratios), 1.1, false)
	row("  ratio of the medians", ms(median(lib)), ms(median(cli)), float64(median(lib))/float64(median(cli)), "")
	row("  CPU time of the criu processes (median of pair ratios)", ms(median(libCPU)), ms(median(cliCPU)), median(cpuRatios), "")
	return nil
}

// libDumpRestore times Dump (kill) + Restore of pid through go-criu; reap
// waits for the dumped incarnation. It returns how to reap the restored one.
func libDumpRestore(ctx context.Context, c *criu.Client, pid int, images string, reap func() error) (sample, func() error, error) {
	cpu0, start := childCPU(), time.Now()
	if err := c.Dump(ctx, pid, images, criu.DumpOptions{LogDir: filepath.Dir(images)}); err != nil {
		return sample{}, reap, err
	}
	s := sample{wall: time.Since(start), cpu: childCPU() - cpu0}
	_ = reap() // the PID must be free for the restore
	cpu0, start = childCPU(), time.Now()
	r, err := c.Restore(ctx, images, criu.RestoreOptions{LogDir: filepath.Dir(images)})
	if err != nil {
		return sample{}, func() error { return nil }, err
	}
	s.wall, s.cpu = s.wall+time.Since(start), s.cpu+childCPU()-cpu0
	return s, func() error { _ = r.Wait(); return nil }, nil
}

// sample is one dump+restore: wall time, and CPU time of the CRIU processes
// (children reaped meanwhile; the restored tree is reaped outside the
// timed intervals, so its own CPU time is on neither side).
type sample struct{ wall, cpu time.Duration }

// childCPU returns user+sys time of this process's reaped children.
func childCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cliDumpRestore times `criu dump` + `criu restore -d` of pid. The restored
// tree is reparented to this process (a subreaper), which reaps it.
func cliDumpRestore(path string, pid int, images string, reap func() error) (sample, func() error, error) {
	cpu0, start := childCPU(), time.Now()
	if out, err := exec.Command(path, "dump", "-t", fmt.Sprint(pid), "-D", images, "-o", "../dump.log").CombinedOutput(); err != nil {
		return sample{}, reap, fmt.Errorf("criu dump: %v: %s", err, out)
	}
	s := sample{wall: time.Since(start), cpu: childCPU() - cpu0}
	_ = reap()
	cpu0, start = childCPU(), time.Now()
	if out, err := exec.Command(path, "restore", "-d", "-D", images, "-o", "../restore.log").CombinedOutput(); err != nil {
		return sample{}, func() error { return nil }, fmt.Errorf("criu restore: %v: %s", err, out)
	}
	s.wall, s.cpu = s.wall+time.Since(start), s.cpu+childCPU()-cpu0
	return s, func() error {
		var ws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(pid, &ws, 0, nil); !errors.Is(err, syscall.EINTR) {
				return err
			}
		}
	}, nil
}
