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

// Prune applies r to k's checkpoints (List's order: the newest is the one
// stored last) and then garbage-collects the chunks of k's namespace that no
// manifest of that namespace references.
func (s *Store) Prune(ctx context.Context, k Key, r Retention, now time.Time) (PruneResult, error) {
	var res PruneResult
	s.mu.Lock()
	defer s.mu.Unlock()
	ms, err := s.List(ctx, k)
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
		if err := s.b.Delete(ctx, manifestKey(k, m.ID)); err != nil {
			return res, fmt.Errorf("delete checkpoint %s/%s: %w", k, m.ID, err)
		}
		res.Deleted = append(res.Deleted, m.ID)
	}
	n, b, err := s.gc(ctx, k.Namespace, now)
	res.Chunks, res.Bytes = n, b
	if err != nil {
		return res, err
	}
	klog.FromContext(ctx).V(2).Info("Pruned checkpoints", "namespace", k.Namespace, "agent", k.Agent, "deleted", res.Deleted, "chunks", n, "bytes", b)
	return res, nil
}

// gc deletes chunks of namespace that no manifest of namespace references
// and that are older than ChunkGrace. A manifest that does not verify stops
// the collection (its chunks might be live).
func (s *Store) gc(ctx context.Context, namespace string, now time.Time) (int, int64, error) {
	prefix := layoutPrefix + namespace + "/manifests/"
	objs, err := s.b.List(ctx, prefix)
	if err != nil {
		return 0, 0, err
	}
	live := map[string]bool{}
	for _, o := range objs {
		agent, name, ok := strings.Cut(strings.TrimPrefix(o.Key, prefix), "/")
		id, isJSON := strings.CutSuffix(name, ".json")
		if !ok || !isJSON || strings.Contains(id, "/") {
			continue
		}
		m, err := s.Manifest(ctx, Key{Namespace: namespace, Agent: agent}, id)
		if err != nil {
			return 0, 0, fmt.Errorf("gc: %w", err)
		}
		for _, f := range m.Files {
			for _, c := range f.Chunks {
				key, err := chunkKey(namespace, c.SHA256, m.Compression)
				if err != nil {
					return 0, 0, fmt.Errorf("gc: %w", err)
				}
				live[key] = true
			}
		}
	}
	chunks, err := s.b.List(ctx, chunkDir(namespace))
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
