package snapshot

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/checkpoint/container"
)

// CacheEvicter is implemented by engines that keep this node's dumps in a local cache
// (container.Engine.LocalCacheDir). An entry lives as long as the AgentCheckpoint that wrote it:
// the Reconciler evicts it when that AgentCheckpoint is deleted (an AgentSession's are deleted
// with it), and the sweep evicts what a deletion missed (the node agent was down, a restore held
// the entry).
type CacheEvicter interface {
	// CachedCheckpoints lists the cache's entries.
	CachedCheckpoints() []container.CachedCheckpoint
	// EvictCached removes the entries of checkpoint id of namespace that no restore holds.
	EvictCached(namespace, id string) (removed, held int)
}

// CachedCheckpoints implements CacheEvicter.
func (e *ContainerdEngine) CachedCheckpoints() []container.CachedCheckpoint {
	return e.C.CachedCheckpoints()
}

// EvictCached implements CacheEvicter.
func (e *ContainerdEngine) EvictCached(namespace, id string) (removed, held int) {
	return e.C.EvictCached(namespace, id)
}

// DefaultCacheSweepGrace is how long a cache entry is spared after it was kept or used before
// the sweep may evict it for want of its AgentCheckpoint.
const DefaultCacheSweepGrace = time.Minute

// evictDeleted evicts this node's cached dump of the AgentCheckpoint nn, which is gone.
func (r *Reconciler) evictDeleted(ctx context.Context, nn types.NamespacedName) {
	ev, ok := r.Engine.(CacheEvicter)
	if !ok {
		return
	}
	id := v1alpha1.CheckpointIDFor(nn.Namespace, nn.Name)
	if removed, held := ev.EvictCached(nn.Namespace, id); removed+held > 0 {
		klog.FromContext(ctx).V(2).Info("Evicted the local cache entry of a deleted AgentCheckpoint", "id", id, "removed", removed, "held", held)
	}
}

// orphanedEntries are the cache entries whose checkpoint no AgentCheckpoint of live (checkpoint
// ids, v1alpha1.CheckpointIDFor) wrote, and that were not kept or used within grace before now.
func orphanedEntries(entries []container.CachedCheckpoint, live map[string]bool, now time.Time, grace time.Duration) []container.CachedCheckpoint {
	var out []container.CachedCheckpoint
	for _, en := range entries {
		if !live[en.ID] && now.Sub(en.Used) >= grace {
			out = append(out, en)
		}
	}
	return out
}

// sweepCache evicts the cache entries of AgentCheckpoints that no longer exist (orphanedEntries).
func (r *Reconciler) sweepCache(ctx context.Context, now time.Time, grace time.Duration) error {
	ev, ok := r.Engine.(CacheEvicter)
	if !ok {
		return nil
	}
	entries := ev.CachedCheckpoints()
	if len(entries) == 0 {
		return nil
	}
	var list v1alpha1.AgentCheckpointList
	if err := r.Client.List(ctx, &list); err != nil {
		return err
	}
	live := make(map[string]bool, len(list.Items))
	for i := range list.Items {
		live[CheckpointID(&list.Items[i])] = true
	}
	for _, en := range orphanedEntries(entries, live, now, grace) {
		removed, held := ev.EvictCached(en.Key.Namespace, en.ID)
		klog.FromContext(ctx).V(2).Info("Evicted a local cache entry without its AgentCheckpoint", "key", en.Key.String(), "id", en.ID, "removed", removed, "held", held)
	}
	return nil
}

// cacheSweep runs Reconciler.sweepCache periodically while the manager runs.
type cacheSweep struct {
	r     *Reconciler
	every time.Duration
	grace time.Duration
}

// Start implements manager.Runnable.
func (s cacheSweep) Start(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithName("checkpoint-cache-sweep")
	ctx = klog.NewContext(ctx, logger)
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			if err := s.r.sweepCache(ctx, now, s.grace); err != nil {
				logger.Error(err, "Sweeping the local checkpoint cache")
			}
		}
	}
}
