// Package stateproc is a process with known state used by the checkpoint
// tests and benchmarks: a counter that advances every tick and a "weights"
// buffer whose sha256 proves that memory survived a checkpoint and restore.
//
// The weights are either anonymous memory (generated, or read from a file
// into the heap) or, with [Options.MapWeights], a private read-only mapping
// of a weights file, as inference servers map safetensors/GGUF files from a
// node-local model cache. Building the state reads every weights byte and
// derives an anonymous state buffer of [Options.StateMiB] from them.
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

	"golang.org/x/sys/unix"
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
	// EnvMap, when "1", maps EnvWeights MAP_PRIVATE read-only instead of
	// reading it into anonymous memory.
	EnvMap = "NN_STATEPROC_MAP"
	// EnvStateMiB is the size in MiB of the anonymous state derived from
	// the weights (0: none).
	EnvStateMiB = "NN_STATEPROC_STATE_MIB"
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
	stateMiB := 0
	if v := os.Getenv(EnvStateMiB); v != "" {
		if stateMiB, err = strconv.Atoi(v); err != nil || stateMiB < 0 {
			return fmt.Errorf("%s=%q: want a size in MiB", EnvStateMiB, v)
		}
	}
	weights, err := loadWeights(os.Getenv(EnvWeights), mib<<20, os.Getenv(EnvMap) == "1")
	if err != nil {
		return err
	}
	// Building the state: reading every weights byte (the digest) and
	// deriving an anonymous buffer from them stand in for the work an agent
	// does after loading (tokenizer, KV layout, warmup).
	state := buildState(weights, stateMiB<<20)
	digest := digestOf(weights, state)
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
			if err := writeAtomic(filepath.Join(dir, "verify"), fmt.Sprintf("%d %s", counter, digestOf(weights, state))); err != nil {
				return err
			}
		}
	}
}

// loadWeights returns size bytes of weights: generated when path is empty,
// read into anonymous memory, or mapped MAP_PRIVATE read-only (mapped).
func loadWeights(path string, size int, mapped bool) ([]byte, error) {
	if path == "" {
		if mapped {
			return nil, fmt.Errorf("%s=1 needs %s", EnvMap, EnvWeights)
		}
		w := make([]byte, size)
		FillWeights(w)
		return w, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if !mapped {
		w := make([]byte, size)
		if _, err := io.ReadFull(f, w); err != nil {
			return nil, fmt.Errorf("read weights %s: %w", path, err)
		}
		return w, nil
	}
	// The mapping outlives the descriptor; its clean pages stay file-backed,
	// which is what lets CRIU leave them out of the dump.
	w, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		return nil, fmt.Errorf("mmap weights %s (%d bytes): %w", path, size, err)
	}
	return w, nil
}

// buildState derives size bytes of state from the weights: each byte mixes
// a sequential and a strided weights byte (indices wrap at len(weights)).
func buildState(weights []byte, size int) []byte {
	if size == 0 || len(weights) == 0 {
		return nil
	}
	s := make([]byte, size)
	n := len(weights)
	stride := 4099 % n
	a, b := 0, 7%n
	for i := range s {
		s[i] = weights[a] ^ weights[b] ^ byte(i)
		if a++; a == n {
			a = 0
		}
		if b += stride; b >= n {
			b -= n
		}
	}
	return s
}

// digestOf hashes the weights, then the state; with no state it is the
// weights' sha256.
func digestOf(weights, state []byte) string {
	h := sha256.New()
	h.Write(weights)
	h.Write(state)
	return hex.EncodeToString(h.Sum(nil))
}

func writeAtomic(path, content string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// Options select how the helper loads its weights and how much state it builds.
type Options struct {
	// MiB is the weights size.
	MiB int
	// WeightsFile, if set, is the file the weights come from; otherwise they
	// are generated from a fixed seed.
	WeightsFile string
	// MapWeights maps WeightsFile MAP_PRIVATE read-only instead of reading it.
	MapWeights bool
	// StateMiB is the size of the anonymous state derived from the weights.
	StateMiB int
}

// Start re-executes the current binary as the helper with anonymous weights
// (see [StartWith]).
func Start(dir string, mib int, weightsFile string) (*exec.Cmd, error) {
	return StartWith(dir, Options{MiB: mib, WeightsFile: weightsFile})
}

// StartWith re-executes the current binary as the helper, detached for CRIU,
// and waits until it is ready. The caller must reap it with cmd.Wait.
func StartWith(dir string, o Options) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	out, err := os.OpenFile(filepath.Join(dir, "stateproc.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	mapped := "0"
	if o.MapWeights {
		mapped = "1"
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), Env+"=1", EnvDir+"="+dir, EnvMiB+"="+strconv.Itoa(o.MiB), EnvWeights+"="+o.WeightsFile,
		EnvMap+"="+mapped, EnvStateMiB+"="+strconv.Itoa(o.StateMiB))
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if err := WaitFile(filepath.Join(dir, "ready"), 60*time.Second); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		b, _ := os.ReadFile(filepath.Join(dir, "stateproc.log"))
		return nil, fmt.Errorf("%w (helper log: %s)", err, strings.TrimSpace(string(b)))
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
