package sharing

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/driver/config"
)

// TestExec runs a real child process with extra environment and standard input.
func TestExec(t *testing.T) {
	out, err := Exec(context.Background(), Command{Path: "/bin/sh", Args: []string{"-c", `read line; echo "$line:$SHARING_TEST"`}, Env: []string{"SHARING_TEST=x"}, Stdin: "quit\n"})
	if err != nil || strings.TrimSpace(string(out)) != "quit:x" {
		t.Fatalf("output %q, err %v", out, err)
	}
	if _, err := Exec(context.Background(), Command{Path: "/bin/false"}); err == nil {
		t.Error("a failing tool reported success")
	}
}

func TestNotConfigured(t *testing.T) {
	var nilTools *Tools
	for name, err := range map[string]error{
		"nil time slice":   nilTools.SetTimeSlice(context.Background(), "GPU-a", config.TimeSliceLong),
		"nil mps":          nilTools.StartMPS(context.Background(), Daemon{ID: "x"}),
		"empty time slice": (&Tools{}).SetTimeSlice(context.Background(), "GPU-a", config.TimeSliceLong),
	} {
		if !errors.Is(err, ErrNotConfigured) {
			t.Errorf("%s: %v, want ErrNotConfigured", name, err)
		}
	}
	if err := nilTools.StopMPS(context.Background(), Daemon{ID: "x"}); err != nil {
		t.Errorf("stop without tools: %v", err)
	}
}

// TestMPSRootMustBeVisibleInChroot: with a chroot, a daemon whose directories the chroot does not
// show is refused before it is started.
func TestMPSRootMustBeVisibleInChroot(t *testing.T) {
	root := t.TempDir()
	var ran []Command
	tl := &Tools{MPSControl: "/usr/bin/nvidia-cuda-mps-control", MPSRoot: filepath.Join(t.TempDir(), "mps"), Chroot: filepath.Join(root, "driver-root"),
		Run: func(_ context.Context, c Command) ([]byte, error) { ran = append(ran, c); return nil, nil }}
	err := tl.StartMPS(context.Background(), Daemon{ID: "c-0", UUIDs: []string{"GPU-a"}})
	if err == nil || !strings.Contains(err.Error(), "not visible under the driver root") || len(ran) != 0 {
		t.Fatalf("err %v, commands %v", err, ran)
	}
	tl.Chroot = "/"
	if err := tl.StartMPS(context.Background(), Daemon{ID: "c-0", UUIDs: []string{"GPU-a"}}); err != nil || len(ran) != 1 || ran[0].Chroot != "/" {
		t.Fatalf("with the host root: %v %v", err, ran)
	}
	ids, err := tl.DaemonIDs()
	if err != nil || len(ids) != 1 || ids[0] != "c-0" {
		t.Errorf("daemon ids %v %v", ids, err)
	}
	if err := tl.StopMPS(context.Background(), Daemon{ID: "c-0"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tl.MPSRoot, "c-0")); !os.IsNotExist(err) {
		t.Errorf("daemon directory left: %v", err)
	}
}
