package criu

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

	gocriu "github.com/checkpoint-restore/go-criu/v7"
	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"
)

// Check runs `criu check` with the given binary. It returns nil when CRIU
// reports that the kernel has what dump and restore need, and otherwise an
// error wrapping [ErrUnavailable] that carries CRIU's own explanation.
func Check(ctx context.Context, path string) error {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "check")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s check: %v: %s", ErrUnavailable, path, err, strings.TrimSpace(out.String()))
	}
	return nil
}

// Features is what the running kernel and CRIU support beyond plain dump and
// restore. Each unavailable feature has a reason that callers log when they
// degrade.
type Features struct {
	// Version is CRIU's version as major*10000+minor*100+sublevel.
	Version int
	// MemTrack reports soft-dirty memory tracking, which pre-dumps and
	// incremental (parent-image) dumps need.
	MemTrack bool
	// LazyPages reports userfaultfd-based lazy restore.
	LazyPages bool
	// PidfdStore reports pidfd-based PID reuse detection between pre-dumps.
	PidfdStore bool
	// Reasons maps an unavailable feature name to why it is unavailable.
	Reasons map[string]string
}

// IncrementalReason returns why incremental (pre-dump) checkpoints are
// unavailable, or "" when they are available.
func (f Features) IncrementalReason() string {
	return f.Reasons["mem_track"]
}

// DetectFeatures asks CRIU (through its RPC feature check) which optional
// features this kernel supports.
func DetectFeatures(path string) (Features, error) {
	c := gocriu.MakeCriu()
	c.SetCriuPath(path)
	v, err := c.GetCriuVersion()
	if err != nil {
		return Features{}, fmt.Errorf("%w: version query via %s: %v", ErrUnavailable, path, err)
	}
	got, err := c.FeatureCheck(&rpc.CriuFeatures{
		MemTrack:   proto.Bool(true),
		LazyPages:  proto.Bool(true),
		PidfdStore: proto.Bool(true),
	})
	if err != nil {
		return Features{}, fmt.Errorf("%w: feature check via %s: %v", ErrUnavailable, path, err)
	}
	f := Features{
		Version:    v,
		MemTrack:   got.GetMemTrack(),
		LazyPages:  got.GetLazyPages(),
		PidfdStore: got.GetPidfdStore(),
		Reasons:    map[string]string{},
	}
	if !f.MemTrack {
		f.Reasons["mem_track"] = "kernel lacks soft-dirty memory tracking (CRIU feature check mem_track=false): " +
			"pre-dumps are unavailable, every checkpoint is a full dump and the image store's chunk dedup provides the incremental saving"
	}
	if !f.LazyPages {
		f.Reasons["lazy_pages"] = "userfaultfd lazy pages unavailable (CRIU feature check lazy_pages=false): restores copy all pages up front"
	}
	if !f.PidfdStore {
		f.Reasons["pidfd_store"] = "pidfd store unavailable (CRIU feature check pidfd_store=false)"
	}
	return f, nil
}
