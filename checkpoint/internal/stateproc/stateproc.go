// Package stateproc is a process with known state used by the checkpoint
// tests and benchmarks: a counter that advances every tick and a "weights"
// buffer whose sha256 proves that memory survived a checkpoint and restore.
//
// A test binary re-executes itself with [Env] set (see [MaybeRun] and
// [Start]); the child detaches (new session, no tty, stdio to files) so CRIU
// can dump it.
package stateproc

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Environment variables understood by the helper.
const (
	// Env, when "1", makes MaybeRun run the helper instead of the tests.
	Env = "NN_STATEPROC"
	// EnvDir is the directory the helper writes its state files into.
	EnvDir = "NN_STATEPROC_DIR"
	// EnvMiB is the size of the weights buffer in MiB.
	EnvMiB = "NN_STATEPROC_MIB"
	// EnvWeights, if set, is a file the weights are read from (a cold start
	// that loads weights); otherwise they are generated from a fixed seed.
	EnvWeights = "NN_STATEPROC_WEIGHTS"
)

// Tick is how often the counter advances.
const Tick = 10 * time.Millisecond

// MaybeRun runs the helper and exits if [Env] is set; call it first in TestMain.
func MaybeRun() {
	if os.Getenv(Env) != "1" {
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "stateproc:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// FillWeights fills b deterministically, as the helper does without EnvWeights.
func FillWeights(b []byte) {
	r := rand.NewChaCha8([32]byte{'n', 'n'})
	_, _ = r.Read(b)
}

func run() error {
	dir := os.Getenv(EnvDir)
	mib, err := strconv.Atoi(os.Getenv(EnvMiB))
	if err != nil || dir == "" {
		return fmt.Errorf("need %s and %s", EnvDir, EnvMiB)
	}
	weights := make([]byte, mib<<20)
	if p := os.Getenv(EnvWeights); p != "" {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		if _, err := io.ReadFull(f, weights); err != nil {
			return fmt.Errorf("read weights %s: %w", p, err)
		}
		f.Close()
	} else {
		FillWeights(weights)
	}
	// Building the state: the digest of the weights stands in for the work
	// an agent does after loading (tokenizer, KV layout, warmup).
	sum := sha256.Sum256(weights)
	digest := hex.EncodeToString(sum[:])
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	// The state file stays open and is rewritten in place with fixed-width
	// records: a dump never catches a half-renamed temp file, and the
	// restored process finds its file where it was.
	st, err := os.OpenFile(filepath.Join(dir, "state"), os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	t := time.NewTicker(Tick)
	var counter int64
	// Ready only once the signal handler and state file exist.
	if err := writeAtomic(filepath.Join(dir, "ready"), digest); err != nil {
		return err
	}
	for {
		select {
		case <-t.C:
			counter++
			if _, err := st.WriteAt([]byte(fmt.Sprintf("%020d %s\n", counter, digest)), 0); err != nil {
				return err
			}
		case <-usr1:
			now := sha256.Sum256(weights)
			if err := writeAtomic(filepath.Join(dir, "verify"), fmt.Sprintf("%d %s", counter, hex.EncodeToString(now[:]))); err != nil {
				return err
			}
		}
	}
}

func writeAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Start re-executes the current binary as the helper, detached for CRIU, and
// waits until it is ready. The caller must reap it with cmd.Wait.
func Start(dir string, mib int, weightsFile string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	out, err := os.OpenFile(filepath.Join(dir, "stateproc.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), Env+"=1", EnvDir+"="+dir, EnvMiB+"="+strconv.Itoa(mib), EnvWeights+"="+weightsFile)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if err := WaitFile(filepath.Join(dir, "ready"), 60*time.Second); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	return cmd, nil
}

// WaitFile waits until path exists.
func WaitFile(path string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", timeout, path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// State is what the helper last reported.
type State struct {
	Counter int64
	Digest  string
}

// ReadState parses the file the helper rewrites every tick.
func ReadState(dir, name string) (State, error) {
	var b []byte
	var f []string
	for try := 0; ; try++ {
		var err error
		if b, err = os.ReadFile(filepath.Join(dir, name)); err != nil {
			return State{}, err
		}
		if f = strings.Fields(string(b)); len(f) == 2 {
			break
		}
		if try == 100 { // an in-place rewrite can be seen half done
			return State{}, fmt.Errorf("malformed %s: %q", name, b)
		}
		time.Sleep(time.Millisecond)
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return State{}, fmt.Errorf("malformed %s counter: %w", name, err)
	}
	return State{Counter: n, Digest: f[1]}, nil
}

// Verify signals pid to re-hash its weights and returns the result.
func Verify(pid int, dir string) (State, error) {
	_ = os.Remove(filepath.Join(dir, "verify"))
	if err := syscall.Kill(pid, syscall.SIGUSR1); err != nil {
		return State{}, fmt.Errorf("signal pid %d: %w", pid, err)
	}
	if err := WaitFile(filepath.Join(dir, "verify"), 30*time.Second); err != nil {
		return State{}, err
	}
	return ReadState(dir, "verify")
}

// WaitCounter waits until the helper's counter reaches at least n, so a test
// can tell a continued counter from a restarted one.
func WaitCounter(dir string, n int64, timeout time.Duration) (State, error) {
	deadline := time.Now().Add(timeout)
	for {
		s, err := ReadState(dir, "state")
		if err == nil && s.Counter >= n {
			return s, nil
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("counter did not reach %d within %v (last %d, err %v)", n, timeout, s.Counter, err)
		}
		time.Sleep(Tick)
	}
}
