package criu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	gocriu "github.com/checkpoint-restore/go-criu/v7"
	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"
)

// Client dumps and restores process trees with one CRIU binary. A Client is
// safe for concurrent use: every operation starts its own CRIU swrk process.
type Client struct {
	// Path is the CRIU binary (see [Locate]).
	Path string
}

// DumpOptions tune a dump.
type DumpOptions struct {
	// LeaveRunning resumes the tree after the dump instead of killing it.
	LeaveRunning bool
	// ShellJob allows a tree whose session or process group leader is outside
	// the tree (a process started from a shell).
	ShellJob bool
	// TCPEstablished dumps established TCP connections.
	TCPEstablished bool
	// ExtUnixSk allows external UNIX sockets.
	ExtUnixSk bool
	// FileLocks dumps file locks.
	FileLocks bool
	// LogDir receives dump.log; empty means the image directory's parent.
	LogDir string
}

// RestoreOptions tune a restore.
type RestoreOptions struct {
	// ShellJob, TCPEstablished, ExtUnixSk and FileLocks must match the dump.
	ShellJob, TCPEstablished, ExtUnixSk, FileLocks bool
	// LogDir receives restore.log; empty means the image directory's parent.
	LogDir string
	// LazyPages restores the tree without its memory pages, which a
	// `criu lazy-pages` daemon then serves on first touch (userfaultfd) and
	// copies in the background. The tree runs at once; the image directory
	// must stay until Restored.LazyDone is closed.
	LazyPages bool
}

// Restored is a process tree restored as a child of the caller (CRIU's
// rst_sibling mode). The caller must Wait or Kill it so it is reaped.
type Restored struct {
	// Pid is the restored root process; it equals the dumped PID.
	Pid  int
	proc *os.Process
	done chan struct{}
	err  error
	// lazyDone is closed when the lazy-pages daemon has served every page
	// and exited (at once for eager restores).
	lazyDone chan struct{}
}

// LazyDone is closed once all memory pages are in place: immediately for an
// eager restore, when the lazy-pages daemon exits for a lazy one.
func (r *Restored) LazyDone() <-chan struct{} { return r.lazyDone }

// Wait waits until the restored root exits and returns its exit error.
func (r *Restored) Wait() error {
	<-r.done
	return r.err
}

// Exited reports whether the restored root has exited.
func (r *Restored) Exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Kill sends SIGKILL to the restored root and reaps it.
func (r *Restored) Kill() error {
	if r.Exited() {
		return nil
	}
	if err := r.proc.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill restored pid %d: %w", r.Pid, err)
	}
	<-r.done
	return nil
}

func (c *Client) open(imageDir string) (*gocriu.Criu, *os.File, error) {
	if c.Path == "" {
		return nil, nil, fmt.Errorf("criu client: empty Path")
	}
	dir, err := os.Open(imageDir)
	if err != nil {
		return nil, nil, fmt.Errorf("open image dir %q: %w", imageDir, err)
	}
	cr := gocriu.MakeCriu()
	cr.SetCriuPath(c.Path)
	return cr, dir, nil
}

func logDirFd(logDir, imageDir string) (*os.File, error) {
	if logDir == "" {
		logDir = filepath.Dir(filepath.Clean(imageDir))
	}
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, fmt.Errorf("log dir %q: %w", logDir, err)
	}
	f, err := os.Open(logDir)
	if err != nil {
		return nil, fmt.Errorf("open log dir %q: %w", logDir, err)
	}
	return f, nil
}

// Dump checkpoints the process tree rooted at pid into imageDir, which must
// exist and be empty. Unless opts.LeaveRunning, the tree is gone afterwards.
func (c *Client) Dump(ctx context.Context, pid int, imageDir string, opts DumpOptions) error {
	logger := klog.FromContext(ctx)
	cr, dir, err := c.open(imageDir)
	if err != nil {
		return err
	}
	defer dir.Close()
	wd, err := logDirFd(opts.LogDir, imageDir)
	if err != nil {
		return err
	}
	defer wd.Close()
	req := &rpc.CriuOpts{
		Pid:            proto.Int32(int32(pid)),
		ImagesDirFd:    proto.Int32(int32(dir.Fd())),
		WorkDirFd:      proto.Int32(int32(wd.Fd())),
		LogFile:        proto.String("dump.log"),
		LogLevel:       proto.Int32(2),
		LeaveRunning:   proto.Bool(opts.LeaveRunning),
		ShellJob:       proto.Bool(opts.ShellJob),
		TcpEstablished: proto.Bool(opts.TCPEstablished),
		ExtUnixSk:      proto.Bool(opts.ExtUnixSk),
		FileLocks:      proto.Bool(opts.FileLocks),
	}
	start := time.Now()
	// No notify callbacks: each would be a round trip to this process
	// while the tree is frozen.
	if err := cr.Dump(req, nil); err != nil {
		return fmt.Errorf("criu dump pid %d into %q: %w%s", pid, imageDir, err, logTail(filepath.Join(wd.Name(), "dump.log")))
	}
	logger.V(2).Info("CRIU dump done", "pid", pid, "dir", imageDir, "leaveRunning", opts.LeaveRunning, "duration", time.Since(start))
	return nil
}

// Restore restores the tree dumped in imageDir as a child of the calling
// process. If CRIU fails, CRIU itself kills whatever it had started, so no
// half-restored process remains.
func (c *Client) Restore(ctx context.Context, imageDir string, opts RestoreOptions) (*Restored, error) {
	logger := klog.FromContext(ctx)
	cr, dir, err := c.open(imageDir)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	wd, err := logDirFd(opts.LogDir, imageDir)
	if err != nil {
		return nil, err
	}
	defer wd.Close()
	// The restored root gets its dumped PID; reading it here lets CRIU run
	// without notify callbacks (round trips to this process while the tree
	// waits).
	pid, err := rootPid(imageDir)
	if err != nil {
		return nil, err
	}
	lazyDone := make(chan struct{})
	var daemon *exec.Cmd
	if opts.LazyPages {
		if daemon, err = c.startLazyPages(imageDir, wd.Name()); err != nil {
			return nil, err
		}
		go func() { _ = daemon.Wait(); close(lazyDone) }()
	} else {
		close(lazyDone)
	}
	req := &rpc.CriuOpts{
		ImagesDirFd:    proto.Int32(int32(dir.Fd())),
		WorkDirFd:      proto.Int32(int32(wd.Fd())),
		LazyPages:      proto.Bool(opts.LazyPages),
		LogFile:        proto.String("restore.log"),
		LogLevel:       proto.Int32(2),
		RstSibling:     proto.Bool(true),
		ShellJob:       proto.Bool(opts.ShellJob),
		TcpEstablished: proto.Bool(opts.TCPEstablished),
		ExtUnixSk:      proto.Bool(opts.ExtUnixSk),
		FileLocks:      proto.Bool(opts.FileLocks),
	}
	start := time.Now()
	if err := cr.Restore(req, nil); err != nil {
		if daemon != nil {
			_ = daemon.Process.Kill()
			<-lazyDone
		}
		return nil, fmt.Errorf("criu restore from %q: %w%s", imageDir, err, logTail(filepath.Join(wd.Name(), "restore.log")))
	}
	// RstSibling made the restored root a child of this process.
	if ppid, err := parentOf(pid); err != nil || ppid != os.Getpid() {
		return nil, fmt.Errorf("criu restore from %q: restored root pid %d is not a child of this process (parent %d, %v)", imageDir, pid, ppid, err)
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		return nil, fmt.Errorf("restored pid %d: %w", pid, err)
	}
	r := &Restored{Pid: pid, proc: proc, done: make(chan struct{}), lazyDone: lazyDone}
	go r.reap()
	logger.V(2).Info("CRIU restore done", "pid", r.Pid, "dir", imageDir, "duration", time.Since(start))
	return r, nil
}

// reap waits for the restored root and records how it ended.
func (r *Restored) reap() {
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(r.Pid, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			r.err = fmt.Errorf("wait restored pid %d: %w", r.Pid, err)
		} else if !ws.Exited() || ws.ExitStatus() != 0 {
			r.err = fmt.Errorf("restored pid %d ended: status %v", r.Pid, ws)
		}
		break
	}
	close(r.done)
}

// StartLazyPages starts `criu lazy-pages` on imageDir with workDir and waits for its socket, for
// a restore that another program runs (runc's, for a container) with lazy pages in workDir. The
// daemon exits once it has served every page; the images must stay until then.
func (c *Client) StartLazyPages(imageDir, workDir string) (*exec.Cmd, error) {
	return c.startLazyPages(imageDir, workDir)
}

// startLazyPages starts `criu lazy-pages` on imageDir with workDir (where
// it creates the socket the restore connects to) and waits for the socket.
func (c *Client) startLazyPages(imageDir, workDir string) (*exec.Cmd, error) {
	sock := filepath.Join(workDir, "lazy-pages.socket")
	_ = os.Remove(sock)
	cmd := exec.Command(c.Path, "lazy-pages", "-D", imageDir, "-W", workDir, "-o", "lazy-pages.log", "-v2")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start criu lazy-pages: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			return cmd, nil
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, fmt.Errorf("criu lazy-pages did not create %s%s", sock, logTail(filepath.Join(workDir, "lazy-pages.log")))
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// logTail returns the last error lines of a CRIU log, for error messages.
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var errs []string
	for _, l := range lines {
		if strings.Contains(l, "Error") || strings.Contains(l, "error") {
			errs = append(errs, l)
		}
	}
	if len(errs) == 0 && len(lines) > 0 {
		errs = lines[max(0, len(lines)-3):]
	}
	if len(errs) > 5 {
		errs = errs[len(errs)-5:]
	}
	return " (" + path + ": " + strings.Join(errs, " | ") + ")"
}

// Adopt wraps an existing child process of the caller as a Restored handle,
// so fakes and callers that restore by other means share one API.
func Adopt(pid int) (*Restored, error) {
	proc, err := os.FindProcess(pid)
	if err != nil {
		return nil, fmt.Errorf("adopt pid %d: %w", pid, err)
	}
	r := &Restored{Pid: pid, proc: proc, done: make(chan struct{}), lazyDone: make(chan struct{})}
	close(r.lazyDone)
	go r.reap()
	return r, nil
}
