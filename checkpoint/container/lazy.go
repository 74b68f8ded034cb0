package container

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/checkpoint/criu"
)

// CriuConfigAnnotation is runc's annotation naming a CRIU configuration file for the container's
// checkpoints and restores; CRIU's options from that file override runc's RPC options. runc's
// restore has no lazy-pages switch of its own that containerd passes, so a lazy restore sets
// this annotation to a file saying "lazy-pages".
const CriuConfigAnnotation = "org.criu.config"

// LazyPagesTimeout bounds how long the lazy-pages daemon of a restore may serve pages before it
// is killed (the restored process then faults on pages it never got).
var LazyPagesTimeout = 10 * time.Minute

// criuConfig is restored container id's CRIU configuration file (CriuConfigAnnotation): it holds
// "lazy-pages" during a lazy restore and nothing afterwards, so that a later checkpoint of the
// same container (which reads the same file) is an ordinary dump. Removed with the container.
func (e *Engine) criuConfig(id string) string { return filepath.Join(e.WorkDir, id+".criu.conf") }

// lazyRestore is a lazy restore in progress: its daemon, its work directory (removed when it is
// done, with the staged images when they are there) and the hold on a local cache entry.
type lazyRestore struct {
	daemon  *exec.Cmd
	dir     string
	conf    string
	release func()
}

// startLazy prepares a lazy restore of container name from the images under imgRoot: it writes
// the container's CRIU configuration (lazy-pages), points spec at it, and starts `criu
// lazy-pages` on imgRoot/images with work as its work dir, where runc's CRIU restore (work path
// work) finds the daemon's socket.
func (e *Engine) startLazy(spec *specs.Spec, name, imgRoot, work string) (*lazyRestore, error) {
	path := e.CriuPath
	if path == "" {
		var err error
		if path, err = criu.Locate(); err != nil {
			return nil, fmt.Errorf("lazy restore: %w", err)
		}
	}
	conf := e.criuConfig(name)
	if err := os.WriteFile(conf, []byte("lazy-pages\n"), 0o600); err != nil {
		return nil, fmt.Errorf("lazy restore: write CRIU configuration: %w", err)
	}
	if spec.Annotations == nil {
		spec.Annotations = map[string]string{}
	}
	spec.Annotations[CriuConfigAnnotation] = conf
	daemon, err := (&criu.Client{Path: path}).StartLazyPages(filepath.Join(imgRoot, "images"), work)
	if err != nil {
		_ = os.Remove(conf)
		return nil, fmt.Errorf("lazy restore: %w", err)
	}
	return &lazyRestore{daemon: daemon, dir: work, conf: conf, release: func() {}}, nil
}

// abort kills the daemon of a restore that failed.
func (l *lazyRestore) abort() {
	_ = l.daemon.Process.Kill()
	_ = l.daemon.Wait()
	_ = os.Remove(l.conf)
}

// started hands a running lazy restore over: the configuration is emptied (later dumps of the
// container are eager), and once the daemon has served every page (or LazyPagesTimeout passed)
// the staged images are removed and done is closed. Checkpoint waits for done.
func (e *Engine) started(ctx context.Context, name string, l *lazyRestore) {
	logger := klog.FromContext(ctx).WithValues("container", name)
	if err := os.WriteFile(l.conf, nil, 0o600); err != nil {
		logger.Error(err, "Emptying the CRIU configuration of a lazily restored container")
	}
	done := make(chan struct{})
	e.lazy.Store(name, done)
	start := time.Now()
	go func() {
		defer close(done)
		defer e.lazy.Delete(name)
		defer func() { os.RemoveAll(l.dir); l.release() }()
		timer := time.AfterFunc(LazyPagesTimeout, func() { _ = l.daemon.Process.Kill() })
		defer timer.Stop()
		err := l.daemon.Wait()
		logger.V(2).Info("Lazy pages served", "duration", time.Since(start), "err", err)
	}()
}

// waitLazy waits until the lazy restore of container id, if one runs, has served every page.
func (e *Engine) waitLazy(ctx context.Context, id string) error {
	v, ok := e.lazy.Load(id)
	if !ok {
		return nil
	}
	select {
	case <-v.(chan struct{}):
		return nil
	case <-ctx.Done():
		return fmt.Errorf("container %s: waiting for its lazy restore: %w", id, ctx.Err())
	}
}
