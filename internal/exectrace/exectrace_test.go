package exectrace

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// No path, no trace: stop does nothing and no file appears.
func TestStartEmptyPathTracesNothing(t *testing.T) {
	stop, err := Start("")
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// A real trace can start afterwards: the empty path did not enable tracing.
	path := filepath.Join(t.TempDir(), "x.trace")
	stop, err = Start(path)
	if err != nil {
		t.Fatalf("a trace after the empty path: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// A path gets a Go execution trace (its header names the Go version), closed by stop; a second
// trace while one runs is refused, naming its file; an unwritable path is an error.
func TestStartWritesATrace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.trace")
	stop, err := Start(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Start(filepath.Join(dir, "second.trace")); err == nil || !bytes.Contains([]byte(err.Error()), []byte("second.trace")) {
		t.Errorf("a second trace while one runs: %v, want an error naming its file", err)
	}
	done := make(chan struct{})
	go func() { close(done) }()
	<-done
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("go 1.")) || !bytes.Contains(b[:16], []byte(" trace")) || len(b) < 100 {
		t.Fatalf("not an execution trace: %d bytes starting %q", len(b), b[:min(len(b), 16)])
	}
	if _, err := Start(filepath.Join(dir, "missing", "x.trace")); err == nil {
		t.Error("a trace in a missing directory: no error")
	}
}
