package criu

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	gocriu "github.com/checkpoint-restore/go-criu/v7"
	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"
)

// ProbePreDump tries a real pre-dump of a throw-away child process and
// returns nil if it works. CRIU's feature check can report mem_track=true on
// kernels where soft-dirty tracking still fails at pre-dump time, so only an
// actual pre-dump is conclusive.
func (c *Client) ProbePreDump(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "nn-criu-probe-")
	if err != nil {
		return fmt.Errorf("probe dir: %w", err)
	}
	defer os.RemoveAll(dir)
	images := filepath.Join(dir, "images")
	if err := os.Mkdir(images, 0o755); err != nil {
		return fmt.Errorf("probe images dir: %w", err)
	}
	child := exec.CommandContext(ctx, "sleep", "60")
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := child.Start(); err != nil {
		return fmt.Errorf("probe child: %w", err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	cr, d, err := c.open(images)
	if err != nil {
		return err
	}
	defer d.Close()
	wd, err := logDirFd(dir, images)
	if err != nil {
		return err
	}
	defer wd.Close()
	err = cr.PreDump(&rpc.CriuOpts{
		Pid:         proto.Int32(int32(child.Process.Pid)),
		ImagesDirFd: proto.Int32(int32(d.Fd())),
		WorkDirFd:   proto.Int32(int32(wd.Fd())),
		LogFile:     proto.String("predump.log"),
		LogLevel:    proto.Int32(4),
		TrackMem:    proto.Bool(true),
	}, gocriu.NoNotify{})
	if err != nil {
		return fmt.Errorf("criu pre-dump probe: %w%s", err, logTail(filepath.Join(dir, "predump.log")))
	}
	return nil
}

// DetectAll is [DetectFeatures] plus a real pre-dump probe: when the probe
// fails, MemTrack is cleared and the reason names the probe's error.
func (c *Client) DetectAll(ctx context.Context) (Features, error) {
	f, err := DetectFeatures(c.Path)
	if err != nil {
		return f, err
	}
	if f.MemTrack {
		if perr := c.ProbePreDump(ctx); perr != nil {
			f.MemTrack = false
			f.Reasons["mem_track"] = fmt.Sprintf("pre-dump fails on this kernel (%v): every checkpoint is a full dump "+
				"and the image store's chunk dedup provides the incremental saving", perr)
		}
	}
	return f, nil
}
