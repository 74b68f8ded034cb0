package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/checkpoint"
	"github.com/neuronetes/neuronetes/checkpoint/internal/stateproc"
	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// TestContainerMappedWeights checkpoints a container that maps its weights
// file privately from a bind mount (a node-local model cache), as inference
// servers map safetensors files. The checkpoint records the file; a restore
// with the file unchanged resumes the same state, and a restore after the
// file changed is refused before any container is created.
func TestContainerMappedWeights(t *testing.T) {
	c, runc := requireCRIUContainerd(t)
	tests := []struct {
		name   string
		change bool
	}{
		{"weights unchanged", false},
		{"weights changed after the checkpoint", true},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := nsCtx(context.Background())
			dir, hostDir := t.TempDir(), t.TempDir()
			weights := filepath.Join(dir, "model.safetensors")
			b := make([]byte, 32<<20)
			stateproc.FillWeights(b)
			if err := os.WriteFile(weights, b, 0o644); err != nil {
				t.Fatal(err)
			}
			rootfs := makeRootfs(t, dir, hostDir)
			env := []string{stateproc.Env + "=1", stateproc.EnvDir + "=" + dir, stateproc.EnvMiB + "=32",
				stateproc.EnvWeights + "=" + weights, stateproc.EnvMap + "=1", stateproc.EnvStateMiB + "=4"}
			src := fmt.Sprintf("nn-mapped-src-%d", i)
			task := startContainer(t, ctx, c, src, runc, rootfs, netns(t, fmt.Sprintf("nn-mapped-a%d-%d", i, os.Getpid())), dir, env)
			if err := stateproc.WaitFile(filepath.Join(dir, "ready"), 60*time.Second); err != nil {
				t.Fatal(err)
			}
			before, err := stateproc.Verify(int(task.Pid()), dir)
			if err != nil {
				t.Fatal(err)
			}
			hostEnv := []string{stateproc.Env + "=1", stateproc.EnvDir + "=" + hostDir, stateproc.EnvMiB + "=1"}
			hostID := fmt.Sprintf("nn-mapped-host-%d", i)
			startContainer(t, ctx, c, hostID, runc, rootfs, netns(t, fmt.Sprintf("nn-mapped-b%d-%d", i, os.Getpid())), hostDir, hostEnv)

			d, _ := store.NewDir(t.TempDir())
			st, _ := store.New(d, store.Options{Signer: testSigner(t)})
			e := &Engine{Client: c, Store: st, WorkDir: t.TempDir(), RuncBinary: runc}
			m, err := e.Checkpoint(ctx, src, testKey("agent"), "ck1", CheckpointOptions{})
			if err != nil {
				t.Fatalf("Checkpoint: %v", err)
			}
			// CRIU left the file's clean pages out: the checkpoint is far
			// smaller than the 32 MiB of weights the process read.
			if m.TotalBytes >= 32<<20 {
				t.Errorf("checkpoint holds %d bytes, not less than the mapped 32 MiB", m.TotalBytes)
			}
			if tc.change {
				f, err := os.OpenFile(weights, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				_, err = f.WriteAt([]byte{0xff}, 4321)
				f.Close()
				if err != nil {
					t.Fatal(err)
				}
			}
			name, err := e.Restore(ctx, hostID, testKey("agent"), "ck1", RestoreOptions{Name: fmt.Sprintf("nn-mapped-restored-%d", i)})
			if tc.change {
				if err == nil {
					_ = e.Remove(context.Background(), name)
					t.Fatal("Restore with a changed weights file succeeded")
				}
				if !errors.Is(err, checkpoint.ErrMappedFileChanged) || !strings.Contains(err.Error(), weights) {
					t.Fatalf("error %v does not wrap ErrMappedFileChanged naming %s", err, weights)
				}
				if _, lerr := c.LoadContainer(ctx, fmt.Sprintf("nn-mapped-restored-%d", i)); lerr == nil {
					t.Errorf("a container was created by the refused restore")
				}
				t.Logf("refused: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			_, after := verifyRestored(t, ctx, e, name, dir)
			if after.Digest != before.Digest {
				t.Errorf("restored digest %s, want %s", after.Digest, before.Digest)
			}
			t.Logf("checkpoint %d bytes for 32 MiB of mapped weights; restored %s", m.TotalBytes, name)
		})
	}
}
