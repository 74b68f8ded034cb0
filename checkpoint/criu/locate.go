// Package criu is the project's client for CRIU over go-criu/v7: process-tree
// dump and restore through CRIU's RPC ("swrk") interface, and detection of
// what the running kernel supports.
package criu

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// EnvCriuPath names the environment variable that overrides the CRIU binary.
const EnvCriuPath = "NN_CRIU"

// Locate returns the CRIU binary to use: $NN_CRIU if set, else the wrapper
// .local/bin/criu of the repository containing the working directory (found by
// walking up to the directory holding go.mod), else "criu" from PATH.
func Locate() (string, error) {
	if p := os.Getenv(EnvCriuPath); p != "" {
		return p, nil
	}
	if dir, err := os.Getwd(); err == nil {
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				p := filepath.Join(dir, ".local", "bin", "criu")
				if _, err := os.Stat(p); err == nil {
					return p, nil
				}
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	p, err := exec.LookPath("criu")
	if err != nil {
		return "", fmt.Errorf("no CRIU binary: set %s, run hack/test-deps.d/30-criu.sh, or put criu on PATH: %w", EnvCriuPath, err)
	}
	return p, nil
}

// ErrUnavailable is wrapped by errors from [Check] when CRIU cannot be used.
var ErrUnavailable = errors.New("criu unavailable")
