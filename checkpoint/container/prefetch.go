package container

import (
	"context"
	"os"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// DefaultPrefetchTTL is how long a prefetched checkpoint waits for its restore before its staged
// images are removed, unless Engine.PrefetchTTL says otherwise.
const DefaultPrefetchTTL = 2 * time.Minute

func (e *Engine) prefetchTTL() time.Duration {
	if e.PrefetchTTL > 0 {
		return e.PrefetchTTL
	}
	return DefaultPrefetchTTL
}

// prefetch is a checkpoint fetched (and verified) ahead of its restore.
type prefetch struct {
	done chan struct{}
	dir  string
	err  error
}

// prefetches holds the fetches started by Prefetch, by store key and checkpoint id.
type prefetches struct {
	mu sync.Mutex
	m  map[string]*prefetch
}

func prefetchKey(k store.Key, ckID string) string { return k.String() + "/" + ckID }

// Prefetch starts fetching checkpoint k/ckID into a staging directory in the background, with the
// same verification as Restore (signed manifest, every chunk's sha256), so that a restore whose
// target container is still starting does not wait for the fetch afterwards. The next Restore of
// k/ckID takes the staged images over (waiting for the fetch to end); unclaimed ones are removed
// after Engine.PrefetchTTL. A second Prefetch of the same checkpoint does nothing, nor does one of a
// checkpoint in the local cache (Engine.LocalCacheDir); it reports whether it started a fetch.
func (e *Engine) Prefetch(ctx context.Context, k store.Key, ckID string, progress store.ProgressFunc) bool {
	if e.LocalCacheDir != "" {
		// This node's own dump of it is in the local cache: the restore reads it in place.
		if m, err := e.Store.Manifest(ctx, k, ckID); err == nil {
			if _, release, ok := e.cacheLookup(k, ckID, m); ok {
				release()
				return false
			}
		}
	}
	key := prefetchKey(k, ckID)
	e.pre.mu.Lock()
	if e.pre.m == nil {
		e.pre.m = map[string]*prefetch{}
	}
	if _, ok := e.pre.m[key]; ok {
		e.pre.mu.Unlock()
		return false
	}
	pf := &prefetch{done: make(chan struct{})}
	e.pre.m[key] = pf
	e.pre.mu.Unlock()
	logger := klog.FromContext(ctx).WithValues("key", k.String(), "id", ckID)
	ttl := e.prefetchTTL()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ttl)
	go func() {
		defer cancel()
		start := time.Now()
		pf.dir, pf.err = os.MkdirTemp(e.WorkDir, "ctr-restore-")
		if pf.err == nil {
			if _, pf.err = e.Store.Get(ctx, k, ckID, pf.dir, progress); pf.err != nil {
				_ = os.RemoveAll(pf.dir)
			}
		}
		logger.V(2).Info("Prefetched checkpoint", "duration", time.Since(start), "err", pf.err)
		close(pf.done)
		time.AfterFunc(ttl, func() {
			if e.dropPrefetch(key, pf) && pf.err == nil {
				_ = os.RemoveAll(pf.dir)
			}
		})
	}()
	return true
}

// dropPrefetch removes pf from the map if it is still there, reporting whether it was.
func (e *Engine) dropPrefetch(key string, pf *prefetch) bool {
	e.pre.mu.Lock()
	defer e.pre.mu.Unlock()
	if e.pre.m[key] != pf {
		return false
	}
	delete(e.pre.m, key)
	return true
}

// takePrefetch hands over the staged images of a prefetch of k/ckID, waiting for it to end:
// ok is false when there was none or it failed (Restore then fetches itself).
func (e *Engine) takePrefetch(ctx context.Context, k store.Key, ckID string) (string, bool, error) {
	key := prefetchKey(k, ckID)
	e.pre.mu.Lock()
	pf := e.pre.m[key]
	e.pre.mu.Unlock()
	if pf == nil {
		return "", false, nil
	}
	select {
	case <-pf.done:
	case <-ctx.Done():
		return "", false, ctx.Err()
	}
	if !e.dropPrefetch(key, pf) || pf.err != nil {
		return "", false, nil
	}
	return pf.dir, true, nil
}
