package container

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	containerd "github.com/containerd/containerd/v2/client"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/neuronetes/neuronetes/checkpoint/workspace"
)

// pauseTask records Pause and Resume; every other method is the embedded nil Task's.
type pauseTask struct {
	containerd.Task
	calls []string
}

func (p *pauseTask) Pause(context.Context) error  { p.calls = append(p.calls, "pause"); return nil }
func (p *pauseTask) Resume(context.Context) error { p.calls = append(p.calls, "resume"); return nil }

func wsSpec(src string) *specs.Spec {
	return &specs.Spec{Mounts: []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/workspace", Type: "bind", Source: src, Options: []string{"rbind", "rw"}},
	}}
}

// TestWorkspaceArchiveAndRestore: the workspace is archived while the task is paused (resumed
// only by the caller, after the dump), recorded, and written into the host container's own
// mount of the same path at restore.
func TestWorkspaceArchiveAndRestore(t *testing.T) {
	src, dir, dst := t.TempDir(), t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "notes.txt"), []byte("turn 1\nturn 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	task := &pauseTask{}
	meta, resume, err := archiveWorkspace(context.Background(), task, wsSpec(src), dir, WorkspaceOptions{Path: "/workspace", Limit: 1 << 20, Describe: "sizeLimit"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(task.calls, ",") != "pause" {
		t.Fatalf("task calls %v before the dump, want pause only", task.calls)
	}
	resume()
	if strings.Join(task.calls, ",") != "pause,resume" {
		t.Fatalf("task calls %v, want pause,resume", task.calls)
	}
	if *meta != (WorkspaceMeta{Path: "/workspace", Limit: 1 << 20, Bytes: 14, Entries: 1}) {
		t.Fatalf("meta %+v", *meta)
	}
	if err := restoreWorkspace(dir, meta, wsSpec(dst)); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "notes.txt")); err != nil || string(b) != "turn 1\nturn 2\n" {
		t.Fatalf("restored notes.txt %q %v", b, err)
	}
	// A host container without that mount: refused, naming the path.
	err = restoreWorkspace(dir, meta, &specs.Spec{})
	if err == nil || !strings.Contains(err.Error(), "/workspace") {
		t.Fatalf("restore into a host without the mount: %v", err)
	}
}

// TestWorkspaceOverLimitKeepsRunning: over the limit (or without one), the checkpoint fails with
// ErrTooLarge naming the setting, the task is resumed, and the workspace is untouched.
func TestWorkspaceOverLimitKeepsRunning(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "big"), make([]byte, 4096), 0o644); err != nil {
		t.Fatal(err)
	}
	task := &pauseTask{}
	_, _, err := archiveWorkspace(context.Background(), task, wsSpec(src), t.TempDir(),
		WorkspaceOptions{Path: "/workspace", Limit: 1024, Describe: `emptyDir volume "workspace" sizeLimit`})
	if !errors.Is(err, workspace.ErrTooLarge) || !strings.Contains(err.Error(), `emptyDir volume "workspace" sizeLimit 1024 bytes`) ||
		!strings.Contains(err.Error(), "keeps running") {
		t.Fatalf("err %v", err)
	}
	if strings.Join(task.calls, ",") != "pause,resume" {
		t.Fatalf("task calls %v, want pause,resume", task.calls)
	}
	if fi, err := os.Stat(filepath.Join(src, "big")); err != nil || fi.Size() != 4096 {
		t.Fatalf("workspace changed: %v %v", fi, err)
	}
	task = &pauseTask{}
	if _, _, err := archiveWorkspace(context.Background(), task, wsSpec(src), t.TempDir(), WorkspaceOptions{Path: "/workspace", Describe: "sizeLimit"}); err == nil || len(task.calls) != 0 {
		t.Fatalf("no limit: err %v, task calls %v; want an error and no pause", err, task.calls)
	}
	if _, _, err := archiveWorkspace(context.Background(), task, wsSpec(src), t.TempDir(), WorkspaceOptions{Path: "/data", Limit: 1}); err == nil || len(task.calls) != 0 {
		t.Fatalf("no mount: err %v, task calls %v", err, task.calls)
	}
}
