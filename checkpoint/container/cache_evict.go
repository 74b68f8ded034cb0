package container

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// CachedCheckpoint is an entry of the local cache (Engine.LocalCacheDir).
type CachedCheckpoint struct {
	Key store.Key
	ID  string
	// Used is when the entry was kept or last used by a restore.
	Used time.Time
}

// CachedCheckpoints lists the entries of the local cache; nil when it is off or empty.
func (e *Engine) CachedCheckpoints() []CachedCheckpoint {
	if e.LocalCacheDir == "" {
		return nil
	}
	var out []CachedCheckpoint
	dirs, _ := filepath.Glob(filepath.Join(e.LocalCacheDir, "*", "*", "*"))
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil || !fi.IsDir() {
			continue
		}
		agentDir := filepath.Dir(d)
		out = append(out, CachedCheckpoint{
			Key: store.Key{Namespace: filepath.Base(filepath.Dir(agentDir)), Agent: filepath.Base(agentDir)},
			ID:  filepath.Base(d), Used: fi.ModTime(),
		})
	}
	return out
}

// EvictCached removes the local cache entries of checkpoint id under namespace, whatever their
// agent key (the node agent evicts by the deleted AgentCheckpoint, whose key it no longer
// knows). An entry a restore holds stays; held counts those. A namespace or id that is not a
// single path element removes nothing.
func (e *Engine) EvictCached(namespace, id string) (removed, held int) {
	if e.LocalCacheDir == "" || !pathElement(namespace) || !pathElement(id) {
		return 0, 0
	}
	agents, _ := os.ReadDir(filepath.Join(e.LocalCacheDir, namespace))
	for _, a := range agents {
		dir := filepath.Join(e.LocalCacheDir, namespace, a.Name(), id)
		if _, err := os.Stat(dir); err != nil {
			continue
		}
		e.cacheRemove(dir)
		if _, err := os.Stat(dir); err == nil {
			held++
		} else {
			removed++
		}
		_ = os.Remove(filepath.Join(e.LocalCacheDir, namespace, a.Name())) // only when empty
	}
	_ = os.Remove(filepath.Join(e.LocalCacheDir, namespace)) // only when empty
	return removed, held
}

func pathElement(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`)
}
