package nodeapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/nodeagent/agent"
	"github.com/neuronetes/neuronetes/nodeagent/cache"
)

// backend is a real agent plus a fixed table of Models.
type backend struct {
	*agent.Agent
	models map[string]agent.Request
}

func (b backend) ResolveModel(_ context.Context, ns, name string) (agent.Request, error) {
	r, ok := b.models[ns+"/"+name]
	if !ok {
		return r, errors.New("model not found")
	}
	return r, nil
}

func TestNodeAPI(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 1<<20)
	rand.Read(data)
	src := filepath.Join(dir, "w.bin")
	os.WriteFile(src, data, 0o644)
	sum := sha256.Sum256(data)
	digest := "sha256:" + hex.EncodeToString(sum[:])

	st, err := cache.Open(filepath.Join(dir, "cache"), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := agent.New(ctx, agent.Config{Store: st, Sources: cache.SourceOptions{FileRoots: []string{dir}}})
	b := backend{Agent: a, models: map[string]agent.Request{"ns/llama": {Digest: digest, URI: "file://" + src}}}
	// Unix socket paths are limited to ~107 bytes: keep it short.
	sock := filepath.Join(os.TempDir(), "nn-api-"+hex.EncodeToString(sum[:4])+".sock")
	errc := make(chan error, 1)
	go func() { errc <- Serve(ctx, sock, Handler(b, "n1", st.Root(), st.UsedBytes)) }()
	c := NewClient(sock)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := c.Status(ctx); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("server not up: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	tests := []struct {
		name    string
		req     EnsureWarmRequest
		wantErr string
	}{
		{"by model", EnsureWarmRequest{Model: &ModelRef{Namespace: "ns", Name: "llama"}}, ""},
		{"by digest, cached", EnsureWarmRequest{Digest: digest}, ""},
		{"unknown model", EnsureWarmRequest{Model: &ModelRef{Namespace: "ns", Name: "nope"}}, "404"},
		{"empty", EnsureWarmRequest{}, "400"},
		{"wrong digest", EnsureWarmRequest{URI: "file://" + src, Digest: "sha256:" + strings.Repeat("0", 64)}, "digest mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := c.EnsureWarm(ctx, tt.req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got.Phase != agent.PhaseReady || !got.Warm {
				t.Fatalf("EnsureWarm = %+v, %v; want Ready and warm", got, err)
			}
		})
	}
	s, err := c.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ready int
	for _, e := range s.Entries {
		if e.Phase == agent.PhaseReady && e.SizeBytes == 1<<20 && e.ResidentBytes == 1<<20 {
			ready++
		}
	}
	if s.Node != "n1" || s.UsedBytes != 1<<20 || ready != 1 {
		t.Fatalf("status = %+v, want node n1, 1 MiB used, one ready resident entry", s)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
