package criu

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParentOf(t *testing.T) {
	got, err := parentOf(os.Getpid())
	if err != nil || got != os.Getppid() {
		t.Errorf("parentOf(self) = %d, %v; want %d", got, err, os.Getppid())
	}
	if _, err := parentOf(1 << 30); err == nil {
		t.Error("parentOf of a missing pid succeeded")
	}
}

func TestRootPidErrors(t *testing.T) {
	tests := []struct {
		name    string
		content []byte // nil: no pstree.img
	}{
		{name: "missing image"},
		{name: "not a CRIU image", content: []byte("hello, this is not protobuf")},
		{name: "empty image", content: []byte{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.content != nil {
				if err := os.WriteFile(filepath.Join(dir, "pstree.img"), tc.content, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if pid, err := rootPid(dir); err == nil {
				t.Errorf("rootPid = %d, want an error", pid)
			}
		})
	}
}
