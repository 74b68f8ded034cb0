package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestWaitFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "model.bin")
	go func() {
		time.Sleep(150 * time.Millisecond)
		// The node agent links a complete entry: the file appears whole.
		_ = os.WriteFile(p+".tmp", []byte("weights"), 0o444)
		_ = os.Rename(p+".tmp", p)
	}()
	start := time.Now()
	n, err := waitFile(context.Background(), p, 10*time.Millisecond)
	if err != nil || n != 7 {
		t.Fatalf("waitFile = %d, %v; want 7, nil", n, err)
	}
	if d := time.Since(start); d < 150*time.Millisecond {
		t.Fatalf("returned after %v, before the file appeared", d)
	}
	go func() {
		time.Sleep(100 * time.Millisecond)
		_ = os.WriteFile(filepath.Join(dir, "model.gguf"), []byte("gguf"), 0o444)
	}()
	if n, err := waitDir(context.Background(), dir, 10*time.Millisecond); err != nil || (n != 7 && n != 4) {
		t.Fatalf("waitDir = %d, %v; want a file's size", n, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := waitFile(ctx, filepath.Join(dir, "absent"), 10*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("absent file: %v, want deadline exceeded", err)
	}
	if _, err := waitDir(ctx, t.TempDir(), 10*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("empty dir: %v, want deadline exceeded", err)
	}
}
