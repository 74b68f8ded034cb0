package gpu

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func TestSupport(t *testing.T) {
	for _, tc := range []struct {
		name       string
		devices    []string
		tool       string
		available  bool
		reasonHint string
	}{
		{"devices and tool", []string{"/dev/nvidia0"}, "/usr/bin/cuda-checkpoint", true, ""},
		{"neither", nil, "", false, "no /dev/nvidia* devices and no cuda-checkpoint"},
		{"no devices", nil, "/usr/bin/cuda-checkpoint", false, "no /dev/nvidia* devices"},
		{"no tool", []string{"/dev/nvidia0"}, "", false, "cuda-checkpoint not on PATH"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := support(tc.devices, tc.tool)
			if s.Available() != tc.available || !strings.Contains(s.Reason, tc.reasonHint) || (s.Reason == "") != tc.available {
				t.Fatalf("support = %+v (available %v), want available %v with a reason containing %q", s, s.Available(), tc.available, tc.reasonHint)
			}
		})
	}
}

// cuda fakes cuda-checkpoint: each toggle flips a pid between running on
// the GPU (an open /dev/nvidia* descriptor) and suspended (none); fail
// names pids whose toggle fails.
type cuda struct {
	suspended map[int]bool
	fail      map[int]bool
	calls     []int
}

func (c *cuda) Run(_ context.Context, _ string, args ...string) ([]byte, error) {
	var pid int
	if _, err := fmt.Sscan(args[len(args)-1], &pid); err != nil {
		return nil, err
	}
	c.calls = append(c.calls, pid)
	if c.fail[pid] {
		return []byte("device busy"), errors.New("exit status 1")
	}
	c.suspended[pid] = !c.suspended[pid]
	return nil, nil
}

func (c *cuda) hooks(gpuPids ...int) *Hooks {
	return &Hooks{Support: support([]string{"/dev/nvidia0"}, "/usr/bin/cuda-checkpoint"), Runner: c,
		UsesGPU: func(pid int) bool { return !c.suspended[pid] && slices.Contains(gpuPids, pid) }}
}

func TestSuspendReturnsOnlySuspended(t *testing.T) {
	c := &cuda{suspended: map[int]bool{}, fail: map[int]bool{12: true}}
	h := c.hooks(11, 12, 13)
	got, err := h.Suspend(context.Background(), "pre-dump", []int{10, 11, 12, 13})
	if err == nil || !reflect.DeepEqual(got, []int{11}) {
		t.Fatalf("Suspend = %v, %v; want [11] and the error of pid 12", got, err)
	}
	if _, err := h.Resume(context.Background(), "undo", got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.calls, []int{11, 12, 11}) || c.suspended[11] || c.suspended[13] {
		t.Fatalf("toggles %v, suspended %v: the undo must toggle 11 alone", c.calls, c.suspended)
	}
}

func TestResumeNamesSuspendedPids(t *testing.T) {
	c := &cuda{suspended: map[int]bool{}}
	h := c.hooks(11)
	got, err := h.Suspend(context.Background(), "pre-dump", []int{10, 11})
	if err != nil || !reflect.DeepEqual(got, []int{11}) {
		t.Fatalf("Suspend = %v, %v", got, err)
	}
	// Suspended, 11 holds no /dev/nvidia* descriptor; Resume must still toggle it.
	if done, err := h.Resume(context.Background(), "post-dump", got); err != nil || !reflect.DeepEqual(done, []int{11}) || c.suspended[11] {
		t.Fatalf("Resume = %v, %v; suspended %v", done, err, c.suspended)
	}
}

func TestResumeWithoutSupportFails(t *testing.T) {
	h := &Hooks{Support: support(nil, ""), Runner: &cuda{suspended: map[int]bool{}}}
	if _, err := h.Resume(context.Background(), "post-restore", []int{11}); err == nil {
		t.Fatal("Resume of suspended pids without cuda-checkpoint succeeded")
	}
	if done, err := h.Resume(context.Background(), "post-restore", nil); err != nil || done != nil {
		t.Fatalf("Resume of nothing = %v, %v", done, err)
	}
	if got, err := h.Suspend(context.Background(), "pre-dump", []int{1}); err != nil || got != nil {
		t.Fatalf("Suspend without support = %v, %v; want a logged no-op", got, err)
	}
}
