package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/neuronetes/neuronetes/checkpoint"
	"github.com/neuronetes/neuronetes/checkpoint/criu"
	"github.com/neuronetes/neuronetes/checkpoint/internal/stateproc"
	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// restoreMode is one way to restore the stored checkpoint.
type restoreMode struct {
	name  string
	lazy  bool
	check checkpoint.MappedCheck
	// judged: the verdict covers this mode (the node agent's default restore).
	judged bool
}

// variant is one way the agent holds its weights.
type variant struct {
	name   string
	mapped bool
	modes  []restoreMode
	// judged: the verdict covers this variant (how agents hold weights with
	// NeuroNetes: mapped from the node's model cache); the other is shown
	// for comparison.
	judged bool
}

// timing splits one restore-to-ready into the steps of Manager.Restore.
type timing struct {
	fetch, check, restore, ready, all time.Duration
}

func restoreVsCold(ctx context.Context, c *criu.Client, cfg config) error {
	weights, err := writeWeightsFile(cfg.weightsDir, cfg.mib)
	if err != nil {
		return err
	}
	defer os.Remove(weights)
	variants := []variant{
		{name: "anonymous weights (old)", modes: []restoreMode{{name: "eager"}, {name: "lazy pages", lazy: true}}},
		{name: "mapped weights (new)", mapped: true, judged: true, modes: []restoreMode{
			{name: "eager", judged: true},
			{name: "lazy pages", lazy: true},
			{name: "eager, weights re-hashed", check: checkpoint.MappedCheckDigest},
		}},
	}
	for vi, v := range variants {
		cold, image, res, err := measureVariant(ctx, c, cfg, weights, fmt.Sprint("v", vi), v)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		coldMed := median(cold)
		fmt.Printf("  %s: checkpoint image %d MiB; cold start (load %d MiB weights + build %d MiB state) median %v of %v\n",
			v.name, image>>20, cfg.mib, cfg.stateMiB, ms(coldMed), roundAll(cold))
		for _, mode := range v.modes {
			ts := res[mode.name]
			pick := func(f func(timing) time.Duration) time.Duration {
				var d []time.Duration
				for _, t := range ts {
					d = append(d, f(t))
				}
				return median(d)
			}
			ready := pick(func(t timing) time.Duration { return t.ready })
			fmt.Printf("    %s: fetch+verify %v, mapped-file check %v, criu restore %v, to first tick %v",
				mode.name, ms(pick(func(t timing) time.Duration { return t.fetch })),
				pick(func(t timing) time.Duration { return t.check }).Round(10*time.Microsecond),
				ms(pick(func(t timing) time.Duration { return t.restore })),
				ms(ready-pick(func(t timing) time.Duration { return t.fetch + t.check + t.restore })))
			if mode.lazy {
				fmt.Printf(", all pages in %v", ms(pick(func(t timing) time.Duration { return t.all })))
			}
			fmt.Println()
			target := "(info)"
			if v.judged && mode.judged {
				target = "<= 0.3"
				judge("restore-to-ready/cold, "+v.name+", "+mode.name, float64(ready)/float64(coldMed), 0.3, false)
			}
			row(fmt.Sprintf("restore-to-ready vs cold start, %s: %s", v.name, mode.name),
				ms(ready), ms(coldMed), float64(ready)/float64(coldMed), target)
		}
	}
	return nil
}

func roundAll(d []time.Duration) []time.Duration {
	out := make([]time.Duration, len(d))
	for i := range d {
		out[i] = ms(d[i])
	}
	return out
}

// writeWeightsFile writes the weights to a file in dir (the node's model
// cache) and syncs it, so later reads hit the page cache and no writeback
// runs during the measurements.
func writeWeightsFile(dir string, mib int) (string, error) {
	f, err := os.CreateTemp(dir, "ckptbench-weights-*.safetensors")
	if err != nil {
		return "", fmt.Errorf("weights file: %w", err)
	}
	buf := make([]byte, mib<<20)
	stateproc.FillWeights(buf)
	_, err = f.Write(buf)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return "", fmt.Errorf("write weights %s: %w", f.Name(), err)
	}
	return f.Name(), nil
}

// measureVariant cold-starts the agent reps times (each from its own
// state directory) and checkpoints the first one once it is ready; after
// each cold start it restores that checkpoint once per mode, the modes in a
// rotating order, so load drift on the shared machine hits all alike.
func measureVariant(ctx context.Context, c *criu.Client, cfg config, weights, key string, v variant) ([]time.Duration, int64, map[string][]timing, error) {
	dir, err := freshDir(cfg.work, key)
	if err != nil {
		return nil, 0, nil, err
	}
	defer os.RemoveAll(dir)
	d, err := store.NewDir(filepath.Join(dir, "store"))
	if err != nil {
		return nil, 0, nil, err
	}
	st, err := store.New(d, store.Options{Signer: benchSigner()})
	if err != nil {
		return nil, 0, nil, err
	}
	m := &checkpoint.Manager{CRIU: c, Store: st, WorkDir: dir}
	opts := stateproc.Options{MiB: cfg.mib, WeightsFile: weights, MapWeights: v.mapped, StateMiB: cfg.stateMiB}
	procDir := filepath.Join(dir, "rep0")
	var cold []time.Duration
	var image int64
	var dumped []byte
	var digest string
	res := map[string][]timing{}
	for i := 0; i < cfg.reps; i++ {
		rdir := filepath.Join(dir, fmt.Sprint("rep", i))
		if err := os.MkdirAll(rdir, 0o755); err != nil {
			return nil, 0, nil, err
		}
		start := time.Now()
		cmd, err := stateproc.StartWith(rdir, opts) // returns once ready
		if err != nil {
			return nil, 0, nil, err
		}
		cold = append(cold, time.Since(start))
		if i == 0 {
			man, err := m.Checkpoint(ctx, checkpoint.CheckpointRequest{Pid: cmd.Process.Pid, Key: benchKey, ID: "ready"})
			if err != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				return nil, 0, nil, err
			}
			image = man.TotalBytes
		} else {
			_ = cmd.Process.Kill()
		}
		_ = cmd.Wait()
		if i == 0 {
			// The state file as the dump left it: every restore starts from
			// it, and ready means the counter moved past it.
			if dumped, err = os.ReadFile(filepath.Join(procDir, "state")); err != nil {
				return nil, 0, nil, err
			}
			b, err := os.ReadFile(filepath.Join(procDir, "ready"))
			if err != nil {
				return nil, 0, nil, err
			}
			digest = string(b)
		}
		for j := range v.modes {
			mode := v.modes[(i+j)%len(v.modes)]
			t, err := restoreOnce(ctx, st, c, cfg.work, procDir, dumped, mode, i == 0, digest)
			if err != nil {
				return nil, 0, nil, fmt.Errorf("restore %s: %w", mode.name, err)
			}
			res[mode.name] = append(res[mode.name], t)
		}
	}
	return cold, image, res, nil
}

// restoreOnce runs the steps of Manager.Restore (fetch and verify every
// chunk, check mapped files, CRIU restore), timing each, and waits until the
// restored agent ticks past its dumped counter. With verify it then has the
// agent re-hash its weights and state and compares with the digest of the
// cold start that was checkpointed (outside the timing).
func restoreOnce(ctx context.Context, st *store.Store, c *criu.Client, work, procDir string, dumped []byte, mode restoreMode, verify bool, digest string) (timing, error) {
	var t timing
	rdir, err := freshDir(work, "restore")
	if err != nil {
		return t, err
	}
	defer os.RemoveAll(rdir)
	if err := os.WriteFile(filepath.Join(procDir, "state"), dumped, 0o644); err != nil {
		return t, err
	}
	before, err := stateproc.ReadState(procDir, "state")
	if err != nil {
		return t, err
	}
	images := filepath.Join(rdir, "images")
	start := time.Now()
	if _, err := st.Get(ctx, benchKey, "ready", images, nil); err != nil {
		return t, err
	}
	t.fetch = time.Since(start)
	if err := checkpoint.CheckMappedFiles(images, mode.check); err != nil {
		return t, err
	}
	t.check = time.Since(start) - t.fetch
	r, err := c.Restore(ctx, images, criu.RestoreOptions{LogDir: rdir, LazyPages: mode.lazy})
	if err != nil {
		return t, err
	}
	defer func() { _ = r.Kill() }()
	t.restore = time.Since(start) - t.fetch - t.check
	// Polled every millisecond: the agent ticks every 10 ms.
	for deadline := start.Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		s, err := stateproc.ReadState(procDir, "state")
		if err == nil && s.Counter > before.Counter {
			break
		}
		if time.Now().After(deadline) {
			return t, fmt.Errorf("restored agent did not tick past %d within 30s (last %d, err %v)", before.Counter, s.Counter, err)
		}
	}
	t.ready = time.Since(start)
	<-r.LazyDone()
	t.all = time.Since(start)
	if verify {
		s, err := stateproc.Verify(r.Pid, procDir)
		if err != nil {
			return t, err
		}
		if s.Digest != digest {
			return t, fmt.Errorf("restored agent hashes to %s, the checkpointed one to %s", s.Digest, digest)
		}
	}
	return t, nil
}
