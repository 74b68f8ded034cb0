package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/klog/v2"
)

// Retention says which checkpoints of an agent to keep. A checkpoint is
// deleted when it is outside the newest KeepLast or older than MaxAge; zero
// values disable a rule. The newest checkpoint is always kept.
type Retention struct {
	// KeepLast keeps at most this many newest checkpoints.
	KeepLast int
	// MaxAge deletes checkpoints created longer ago than this.
	MaxAge time.Duration
}

// PruneResult reports what Prune removed.
type PruneResult struct {
	// Deleted lists the removed checkpoint ids.
	Deleted []string
	// Chunks is the number of chunk objects garbage-collected.
	Chunks int
	// Bytes is their stored size.
	Bytes int64
}

// ChunkGrace protects chunks younger than this from garbage collection, so a
// Put running in another process (whose manifest is not written yet) never
// loses its chunks.
var ChunkGrace = 10 * time.Minute

// Prune applies r to agent's checkpoints and then garbage-collects chunks no
// manifest of any agent references.
func (s *Store) Prune(ctx context.Context, agent string, r Retention, now time.Time) (PruneResult, error) {
	var res PruneResult
	s.mu.Lock()
	defer s.mu.Unlock()
	ms, err := s.List(ctx, agent)
	if err != nil {
		return res, err
	}
	for i, m := range ms {
		newest := i == len(ms)-1
		tooMany := r.KeepLast > 0 && i < len(ms)-r.KeepLast
		tooOld := r.MaxAge > 0 && now.Sub(m.Created) > r.MaxAge
		if newest || !(tooMany || tooOld) {
			continue
		}
		if err := s.b.Delete(ctx, manifestKey(agent, m.ID)); err != nil {
			return res, fmt.Errorf("delete checkpoint %s/%s: %w", agent, m.ID, err)
		}
		res.Deleted = append(res.Deleted, m.ID)
	}
	n, b, err := s.gc(ctx, now)
	res.Chunks, res.Bytes = n, b
	if err != nil {
		return res, err
	}
	klog.FromContext(ctx).V(2).Info("Pruned checkpoints", "agent", agent, "deleted", res.Deleted, "chunks", n, "bytes", b)
	return res, nil
}

// gc deletes chunks that no manifest references and that are older than
// ChunkGrace.
func (s *Store) gc(ctx context.Context, now time.Time) (int, int64, error) {
	objs, err := s.b.List(ctx, "manifests/")
	if err != nil {
		return 0, 0, err
	}
	live := map[string]bool{}
	for _, o := range objs {
		parts := strings.Split(strings.TrimSuffix(o.Key, ".json"), "/")
		if len(parts) != 3 {
			continue
		}
		m, err := s.Manifest(ctx, parts[1], parts[2])
		if err != nil {
			return 0, 0, fmt.Errorf("gc: %w", err)
		}
		for _, f := range m.Files {
			for _, c := range f.Chunks {
				live[chunkKey(c.SHA256, m.Compression)] = true
			}
		}
	}
	chunks, err := s.b.List(ctx, "chunks/")
	if err != nil {
		return 0, 0, err
	}
	var n int
	var bytes int64
	for _, c := range chunks {
		if live[c.Key] || now.Sub(c.ModTime) < ChunkGrace {
			continue
		}
		if err := s.b.Delete(ctx, c.Key); err != nil {
			return n, bytes, fmt.Errorf("gc: %w", err)
		}
		n++
		bytes += c.Size
	}
	return n, bytes, nil
}
