// Package exectrace writes a Go execution trace (runtime/trace) of the whole process to a file:
// a diagnostic that is off unless a path is given (the gateway's --debug-trace-file, the gateway
// bench's proxy -trace-file), for `go tool trace` and the gateway bench's per-request wait
// analysis (docs/demo-agent.md).
package exectrace

import (
	"fmt"
	"os"
	"runtime/trace"
)

// Start begins tracing into path (created or truncated) and returns the function that ends the
// trace and closes the file. An empty path traces nothing: stop is then a no-op.
func Start(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("execution trace: %w", err)
	}
	if err := trace.Start(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("execution trace %s: %w", path, err)
	}
	return func() error {
		trace.Stop()
		if err := f.Close(); err != nil {
			return fmt.Errorf("execution trace %s: %w", path, err)
		}
		return nil
	}, nil
}
