package criu

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/checkpoint/internal/stateproc"
	"github.com/neuronetes/neuronetes/internal/testreq"
)

func TestMain(m *testing.M) {
	stateproc.MaybeRun()
	os.Exit(m.Run())
}

// requireCRIU returns a working CRIU binary or skips with CRIU's reason.
func requireCRIU(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		testreq.Tool(t, "root", "CRIU dump/restore needs root")
	}
	p, err := Locate()
	if err != nil {
		testreq.Tool(t, "criu", "not found (hack/test-deps.d/30-criu.sh builds it): %v", err)
	}
	if err := Check(context.Background(), p); err != nil {
		testreq.Tool(t, "criu", "criu check fails here: %v", err)
	}
	return p
}

func TestCheckReportsMissingBinary(t *testing.T) {
	err := Check(context.Background(), filepath.Join(t.TempDir(), "no-criu"))
	if err == nil {
		t.Fatal("Check of a missing binary returned nil")
	}
}

func TestDetectFeatures(t *testing.T) {
	p := requireCRIU(t)
	f, err := DetectFeatures(p)
	if err != nil {
		t.Fatalf("DetectFeatures: %v", err)
	}
	if f.Version < 30000 {
		t.Errorf("Version = %d, want >= 3.0", f.Version)
	}
	for name, ok := range map[string]bool{"mem_track": f.MemTrack, "lazy_pages": f.LazyPages, "pidfd_store": f.PidfdStore} {
		if !ok && f.Reasons[name] == "" {
			t.Errorf("feature %s unavailable without a reason", name)
		}
		if ok && f.Reasons[name] != "" {
			t.Errorf("feature %s available but has reason %q", name, f.Reasons[name])
		}
	}
	t.Logf("CRIU %d: mem_track=%v lazy_pages=%v pidfd_store=%v incremental=%q", f.Version, f.MemTrack, f.LazyPages, f.PidfdStore, f.IncrementalReason())
}

func TestDumpRestoreContinuesState(t *testing.T) {
	p := requireCRIU(t)
	tests := []struct {
		name         string
		leaveRunning bool
		lazy         bool
	}{
		{name: "kill after dump"},
		{name: "leave running", leaveRunning: true},
		{name: "lazy pages restore", lazy: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			images := filepath.Join(dir, "images")
			if err := os.Mkdir(images, 0o755); err != nil {
				t.Fatal(err)
			}
			cmd, err := stateproc.Start(dir, 64, "")
			if err != nil {
				t.Fatalf("start helper: %v", err)
			}
			pid := cmd.Process.Pid
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			before, err := stateproc.Verify(pid, dir)
			if err != nil {
				t.Fatal(err)
			}
			pre, err := stateproc.WaitCounter(dir, 10, 30*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c := &Client{Path: p}
			if err := c.Dump(ctx, pid, images, DumpOptions{LeaveRunning: tc.leaveRunning}); err != nil {
				t.Fatalf("Dump: %v", err)
			}
			// The dump happened after pre was read: the restored counter
			// must not be below it. In kill mode the state file holds the
			// exact value at the dump.
			dumped := pre
			if tc.leaveRunning {
				time.Sleep(5 * stateproc.Tick)
				if _, err := stateproc.Verify(pid, dir); err != nil {
					t.Fatalf("process not running after leave-running dump: %v", err)
				}
				_ = cmd.Process.Kill()
			}
			_ = cmd.Wait() // the PID must be free for the restore
			if !tc.leaveRunning {
				if dumped, err = stateproc.ReadState(dir, "state"); err != nil {
					t.Fatal(err)
				}
			}
			r, err := c.Restore(ctx, images, RestoreOptions{LazyPages: tc.lazy})
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			defer r.Kill()
			if r.Pid != pid {
				t.Errorf("restored pid %d, want %d", r.Pid, pid)
			}
			after, err := stateproc.Verify(r.Pid, dir)
			if err != nil {
				t.Fatal(err)
			}
			if after.Digest != before.Digest {
				t.Errorf("weights digest after restore %s, want %s", after.Digest, before.Digest)
			}
			if after.Counter < dumped.Counter {
				t.Errorf("counter restarted: %d after restore < %d at dump", after.Counter, dumped.Counter)
			}
			select {
			case <-r.LazyDone():
			case <-time.After(30 * time.Second):
				t.Error("lazy-pages daemon did not finish")
			}
			t.Logf("counter at dump %d, after restore %d", dumped.Counter, after.Counter)
		})
	}
}

func TestDetectAllProbesPreDump(t *testing.T) {
	p := requireCRIU(t)
	c := &Client{Path: p}
	f, err := c.DetectAll(context.Background())
	if err != nil {
		t.Fatalf("DetectAll: %v", err)
	}
	probe := c.ProbePreDump(context.Background())
	if (probe == nil) != f.MemTrack {
		t.Errorf("MemTrack=%v but pre-dump probe error=%v", f.MemTrack, probe)
	}
	if !f.MemTrack && f.IncrementalReason() == "" {
		t.Error("incremental checkpoints unavailable without a reason")
	}
	t.Logf("incremental: memtrack=%v reason=%q", f.MemTrack, f.IncrementalReason())
}
