package helm_test

import (
	"strings"
	"testing"
)

// TestChartCheckpointLazyRestoreAndLocalCache: nodeagent.checkpoint.lazyRestore and
// localCache reach the node agent as --checkpoint-lazy-restore and
// --checkpoint-local-cache-dir/-bytes (defaults off; 8 GiB when the cache is on, as
// docs/checkpoint.md says), the cache directory is a hostPath mounted at the same path, and a cache
// directory that overlaps the store is refused.
func TestChartCheckpointLazyRestoreAndLocalCache(t *testing.T) {
	const on = `"enabled":true`
	tests := []struct {
		name      string
		set       string
		wantArgs  []string // present
		wantNot   []string // absent (prefixes)
		cacheHost string   // hostPath of the checkpoint-cache volume, "" none
		wantErr   string
	}{
		{name: "defaults", set: `nodeagent={"checkpoint":{` + on + `}}`,
			wantNot: []string{"--checkpoint-lazy-restore", "--checkpoint-local-cache-dir", "--checkpoint-local-cache-bytes"}},
		{name: "checkpointing off ignores both", set: `nodeagent={"checkpoint":{"lazyRestore":true,"localCache":{"dir":"/var/cache/nn-ck"}}}`,
			wantNot: []string{"--checkpoint-lazy-restore", "--checkpoint-local-cache-dir"}},
		{name: "lazy", set: `nodeagent={"checkpoint":{` + on + `,"lazyRestore":true}}`,
			wantArgs: []string{"--checkpoint-lazy-restore=true"}, wantNot: []string{"--checkpoint-local-cache-dir"}},
		{name: "cache default bound", set: `nodeagent={"checkpoint":{` + on + `,"localCache":{"dir":"/var/cache/nn-ck"}}}`,
			wantArgs: []string{"--checkpoint-local-cache-dir=/var/cache/nn-ck", "--checkpoint-local-cache-bytes=8589934592"},
			wantNot:  []string{"--checkpoint-lazy-restore"}, cacheHost: "/var/cache/nn-ck"},
		{name: "cache own bound", set: `nodeagent={"checkpoint":{` + on + `,"lazyRestore":true,"localCache":{"dir":"/var/cache/nn-ck","maxBytes":21474836480}}}`,
			wantArgs:  []string{"--checkpoint-lazy-restore=true", "--checkpoint-local-cache-dir=/var/cache/nn-ck", "--checkpoint-local-cache-bytes=21474836480"},
			cacheHost: "/var/cache/nn-ck"},
		{name: "cache is the store", set: `nodeagent={"checkpoint":{` + on + `,"localCache":{"dir":"/var/lib/neuronetes/checkpoints/"}}}`,
			wantErr: "nodeagent.checkpoint.localCache.dir"},
		{name: "cache below the store", set: `nodeagent={"checkpoint":{` + on + `,"localCache":{"dir":"/var/lib/neuronetes/checkpoints/cache"}}}`,
			wantErr: "overlap"},
		{name: "store below the cache", set: `nodeagent={"checkpoint":{` + on + `,"localCache":{"dir":"/var/lib/neuronetes"}}}`,
			wantErr: "overlap"},
		{name: "relative cache dir", set: `nodeagent={"checkpoint":{` + on + `,"localCache":{"dir":"cache"}}}`,
			wantErr: "dir"},
		{name: "zero bound", set: `nodeagent={"checkpoint":{` + on + `,"localCache":{"dir":"/c","maxBytes":0}}}`,
			wantErr: "maxBytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, []string{tc.set})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("render error %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ds := find(objs, "DaemonSet", "nn-neuronetes-nodeagent")
			if ds == nil {
				t.Fatal("no node DaemonSet")
			}
			na := args(container(ds, "nodeagent"))
			for _, a := range tc.wantArgs {
				if !contains(na, a) {
					t.Errorf("args %v lack %s", na, a)
				}
			}
			for _, a := range na {
				for _, p := range tc.wantNot {
					if strings.HasPrefix(a, p) {
						t.Errorf("args have %s, want no %s", a, p)
					}
				}
			}
			host := ""
			for _, v := range get(ds, "spec", "template", "spec", "volumes").([]any) {
				if vm := v.(map[string]any); vm["name"] == "checkpoint-cache" {
					host, _ = get(vm, "hostPath", "path").(string)
				}
			}
			if host != tc.cacheHost {
				t.Errorf("checkpoint-cache hostPath %q, want %q", host, tc.cacheHost)
			}
			mounted := ""
			for _, m := range get(container(ds, "nodeagent"), "volumeMounts").([]any) {
				if mm := m.(map[string]any); mm["name"] == "checkpoint-cache" {
					mounted, _ = mm["mountPath"].(string)
				}
			}
			if mounted != tc.cacheHost {
				t.Errorf("checkpoint-cache mounted at %q, want %q (the flag's path)", mounted, tc.cacheHost)
			}
		})
	}
}
