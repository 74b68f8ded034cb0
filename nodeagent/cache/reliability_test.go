package cache

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// The reliability test re-executes this test binary as the "agent": with NN_CACHE_AGENT_DIR set,
// TestMain runs fetchAllMain instead of the tests.
func TestMain(m *testing.M) {
	if dir := os.Getenv("NN_CACHE_AGENT_DIR"); dir != "" {
		os.Exit(fetchAllMain(dir, os.Getenv("NN_CACHE_AGENT_URL"), strings.Fields(os.Getenv("NN_CACHE_AGENT_DIGESTS"))))
	}
	os.Exit(m.Run())
}

// fetchAllMain ensures every digest, served at <url>/<i>, is cached in dir.
func fetchAllMain(dir, url string, digests []string) int {
	s, err := Open(dir, Options{MaxConcurrent: 4})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var wg sync.WaitGroup
	var failed atomic.Bool
	for i, d := range digests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			src, _ := NewSource(fmt.Sprintf("%s/%d", url, i), SourceOptions{Egress: egress.AllowLoopback()})
			if _, err := s.Ensure(context.Background(), Request{Digest: d, Source: src}); err != nil {
				fmt.Fprintln(os.Stderr, err)
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	if failed.Load() {
		return 1
	}
	return 0
}

// throttledWriter flushes every chunk and sleeps between chunks so that downloads take long enough to
// be killed in the middle.
type throttledWriter struct {
	http.ResponseWriter
	chunk int
	pause time.Duration
}

func (w throttledWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		c := min(len(p), w.chunk)
		k, err := w.ResponseWriter.Write(p[:c])
		n += k
		if err != nil {
			return n, err
		}
		w.ResponseWriter.(http.Flusher).Flush()
		p = p[c:]
		time.Sleep(w.pause)
	}
	return n, nil
}

// TestReliabilitySIGKILL kills the agent with SIGKILL at random moments while it downloads 50 entries
// from a throttled local HTTP server, restarts it each time, and checks after every kill that each
// visible entry re-hashes to its name. In the end every download must have completed.
func TestReliabilitySIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("reliability test skipped in -short mode")
	}
	const files = 50
	blobs := make([][]byte, files)
	var digests []string
	for i := range blobs {
		b, d := content(192<<10+i*1024, uint64(7000+i))
		blobs[i] = b
		digests = append(digests, d)
	}
	var ranged, requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		var i int
		if _, err := fmt.Sscanf(r.URL.Path, "/%d", &i); err != nil || i < 0 || i >= files {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Range") != "" {
			ranged.Add(1)
		}
		// ~1 MiB/s per connection: each entry takes ~200 ms.
		http.ServeContent(throttledWriter{ResponseWriter: w, chunk: 16 << 10, pause: 15 * time.Millisecond}, r, "", time.Time{}, bytes.NewReader(blobs[i]))
	}))
	defer srv.Close()

	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 42))
	deadline := time.Now().Add(45 * time.Second)
	kills, runs := 0, 0
	for {
		if time.Now().After(deadline) {
			t.Fatalf("not all downloads completed within the deadline after %d kills", kills)
		}
		runs++
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "NN_CACHE_AGENT_DIR="+dir, "NN_CACHE_AGENT_URL="+srv.URL, "NN_CACHE_AGENT_DIGESTS="+strings.Join(digests, " "))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		before := requests.Load()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitErr := make(chan error, 1)
		go func() { waitErr <- cmd.Wait() }()
		// Start the kill timer once this run is downloading, so that a slow process start on a loaded
		// machine does not turn every kill into a kill before the first byte.
		for wait := time.Now().Add(10 * time.Second); requests.Load() == before && time.Now().Before(wait); {
			time.Sleep(5 * time.Millisecond)
		}
		// The first 12 runs are killed at a random moment; later runs may finish.
		var err error
		if kills < 12 {
			select {
			case err = <-waitErr:
			case <-time.After(time.Duration(30+rng.IntN(370)) * time.Millisecond):
				_ = cmd.Process.Signal(syscall.SIGKILL)
				<-waitErr
				kills++
				checkEntries(t, dir)
				continue
			}
		} else {
			err = <-waitErr
		}
		if err != nil {
			t.Fatalf("agent run %d failed: %v\n%s", runs, err, stderr.String())
		}
		break
	}
	got := checkEntries(t, dir)
	if got != files {
		t.Fatalf("%d verified entries after completion, want %d", got, files)
	}
	if kills < 5 {
		t.Fatalf("only %d kills landed; the test did not exercise crashes", kills)
	}
	if ranged.Load() == 0 {
		t.Fatalf("no Range request seen after %d kills: downloads were never resumed", kills)
	}
	t.Logf("%d runs, %d SIGKILLs, %d resumed (Range) requests, %d entries verified", runs, kills, ranged.Load(), got)
}

// checkEntries re-hashes every file under sha256/ (what a reader could be served) and fails on any
// mismatch. It returns the number of entries.
func checkEntries(t *testing.T, dir string) int {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(dir, "sha256"))
	if err != nil {
		if os.IsNotExist(err) {
			return 0
		}
		t.Fatal(err)
	}
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if err := s.Verify(de.Name()); err != nil {
			t.Fatalf("corrupt entry served: %v", err)
		}
	}
	return len(des)
}
