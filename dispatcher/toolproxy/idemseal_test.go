package toolproxy

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/sidecar/redistest"
)

func sealerOf(t *testing.T, b byte) *IdemSealer {
	t.Helper()
	s, err := NewIdemSealer(bytes.Repeat([]byte{b}, IdemKeySize))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestRedisIdemSealsAnswers stores a tool answer through the Redis store:
// Redis holds neither the answer nor the argument digest in plain text, a
// replica with the same key replays it, and values nobody with the key wrote
// (a forged plain-text answer, an answer copied to another key, one sealed
// with another key) are never replayed.
func TestRedisIdemSealsAnswers(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rc.Close() })
	ctx := context.Background()
	st := &RedisIdem{Client: rc, Prefix: "t:", Sealer: sealerOf(t, 1)}
	args := ArgsDigest([]byte(`{"amount":100}`))
	const secret = "transfer 4711 done"
	key := IdemKey("ns", "pay", "pool", "k1")
	if prev, err := st.Claim(ctx, key, args, time.Minute); err != nil || prev != nil {
		t.Fatalf("first Claim = %v, %v", prev, err)
	}
	raw, err := rc.Get(ctx, st.key(key)).Result()
	if err != nil || strings.Contains(raw, args) {
		t.Fatalf("pending marker %q (%v) holds the argument digest in plain text", raw, err)
	}
	if err := st.Store(ctx, key, Answer{Status: 200, ContentType: "text/plain", Body: []byte(secret), Args: args}, time.Minute); err != nil {
		t.Fatal(err)
	}
	raw, err = rc.Get(ctx, st.key(key)).Result()
	if err != nil || strings.Contains(raw, secret) || strings.Contains(raw, base64.StdEncoding.EncodeToString([]byte(secret))) || strings.Contains(raw, args) {
		t.Fatalf("stored answer %q (%v) is readable in Redis", raw, err)
	}
	plain, _ := json.Marshal(Answer{Status: 200, Body: []byte("forged"), Args: args})
	forged, moved := IdemKey("ns", "pay", "pool", "forged"), IdemKey("ns", "pay", "pool", "moved")
	rc.Set(ctx, st.key(forged), plain, time.Minute)
	rc.Set(ctx, st.key(moved), raw, time.Minute)
	for _, tc := range []struct {
		name  string
		store *RedisIdem
		key   string
		want  error // nil: the answer is replayed
	}{
		{"replica with the same key", &RedisIdem{Client: rc, Prefix: "t:", Sealer: sealerOf(t, 1)}, key, nil},
		{"replica with another key", &RedisIdem{Client: rc, Prefix: "t:", Sealer: sealerOf(t, 2)}, key, ErrAnswerUnreadable},
		{"forged plain-text answer", st, forged, ErrAnswerUnreadable},
		{"answer copied to another key", st, moved, ErrAnswerUnreadable},
	} {
		prev, err := tc.store.Claim(ctx, tc.key, args, time.Minute)
		switch {
		case tc.want == nil && (err != nil || prev == nil || string(prev.Body) != secret || prev.Status != 200 || prev.ContentType != "text/plain"):
			t.Errorf("%s: Claim = %+v, %v; want the stored answer", tc.name, prev, err)
		case tc.want != nil && (!errors.Is(err, tc.want) || prev != nil):
			t.Errorf("%s: Claim = %+v, %v; want %v", tc.name, prev, err, tc.want)
		}
	}
	if _, err := st.Claim(ctx, key, ArgsDigest([]byte(`{"amount":1}`)), time.Minute); !errors.Is(err, ErrKeyReused) {
		t.Errorf("Claim with other arguments = %v, want ErrKeyReused", err)
	}
	if _, err := (&RedisIdem{Client: rc, Prefix: "t:"}).Claim(ctx, key, args, time.Minute); err == nil {
		t.Error("Claim without a sealer succeeded")
	}
}

func TestLoadIdemKey(t *testing.T) {
	k := bytes.Repeat([]byte{7}, IdemKeySize)
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		content []byte
		ok      bool
	}{
		{"raw", k, true},
		{"base64", []byte(base64.StdEncoding.EncodeToString(k) + "\n"), true},
		{"base64url unpadded", []byte(base64.RawURLEncoding.EncodeToString(k)), true},
		{"short", k[:16], false},
		{"base64 of 16 bytes", []byte(base64.StdEncoding.EncodeToString(k[:16])), false},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_"))
		if err := os.WriteFile(p, tc.content, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := LoadIdemKey(p)
		if tc.ok != (err == nil) || (tc.ok && !bytes.Equal(got, k)) {
			t.Errorf("%s: LoadIdemKey = %x, %v", tc.name, got, err)
		}
	}
	if _, err := LoadIdemKey(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}

// TestClaimIsALease: a pending claim of a replica that died mid-call expires after the call's
// lease, so a retry with the same key goes through instead of a 409 for a day.
func TestClaimIsALease(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rc.Close()
	st := &RedisIdem{Client: rc, Prefix: "t:", Sealer: sealerOf(t, 1)}
	ctx := context.Background()
	key, args := IdemKey("ns", "pay", "agents", "k1"), ArgsDigest([]byte(`{"amount":5}`))
	if _, err := st.Claim(ctx, key, args, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	// The claiming replica dies: no Store, no Abandon.
	if _, err := st.Claim(ctx, key, args, 300*time.Millisecond); err != ErrInProgress {
		t.Fatalf("while the lease holds: %v, want ErrInProgress", err)
	}
	time.Sleep(400 * time.Millisecond)
	if a, err := st.Claim(ctx, key, args, 300*time.Millisecond); err != nil || a != nil {
		t.Fatalf("after the lease: %v %v, want a new claim", a, err)
	}
	if got := ClaimLease(2 * time.Second); got != 2*time.Second+claimMargin || got >= IdempotencyTTL {
		t.Fatalf("ClaimLease(2s) = %v", got)
	}
}
