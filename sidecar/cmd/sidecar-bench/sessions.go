package main

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	sidecarv1 "github.com/neuronetes/neuronetes/sidecar/api/v1"
	"github.com/neuronetes/neuronetes/sidecar/frame"
	"github.com/neuronetes/neuronetes/sidecar/keys"
	"github.com/neuronetes/neuronetes/sidecar/redistest"
	"github.com/neuronetes/neuronetes/sidecar/store"
)

var words = strings.Fields(`the model agent user assistant tool call result context memory session token cache
vector search query answer question retrieve document page section summary plan step error retry latency
GPU node pod cluster scale warm cold request response stream chunk embedding score rank filter policy tenant`)

// chatJSON returns a seeded chat session of about size bytes.
func chatJSON(seed uint64, size int) []byte {
	rng := rand.New(rand.NewPCG(seed, 3))
	var b bytes.Buffer
	b.WriteString(`{"conversation_id":"bench","metadata":{"agent":"demo"},"turns":[`)
	for i := 0; b.Len() < size-120; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		role := []string{"user", "assistant"}[i%2]
		fmt.Fprintf(&b, `{"role":"%s","content":"`, role)
		for n := 8 + rng.IntN(40); n > 0; n-- {
			b.WriteString(words[rng.IntN(len(words))])
			if rng.IntN(9) == 0 {
				fmt.Fprintf(&b, " %d", rng.IntN(100000))
			}
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, `","ts":%d}`, 1764400000+i*7)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

type dist []time.Duration

func (d dist) pct(p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// interleave runs the ops in alternating rounds so that machine noise hits
// baselines and subjects alike, and returns each op's latencies.
func interleave(rounds, per int, ops []func() error) ([]dist, error) {
	out := make([]dist, len(ops))
	for range rounds {
		for i, op := range ops {
			for range per {
				start := time.Now()
				if err := op(); err != nil {
					return nil, err
				}
				out[i] = append(out[i], time.Since(start))
			}
		}
	}
	return out, nil
}

func us(d time.Duration) string { return fmt.Sprintf("%8.1f", float64(d.Nanoseconds())/1e3) }

// row is one measured operation. floor names the baseline rows whose sum is
// the row's floor (empty: the row is a baseline or shown alone); a judged
// row's ratio to its floor must stay within limit at p50 and p99.
type row struct {
	name  string
	op    func() error
	floor []string
	limit float64
}

// sessionEnv is what the session rows run against.
type sessionEnv struct {
	ctx   context.Context
	raw   *redis.Client
	doc   []byte
	echo  *echoProc
	procs map[string]*sidecarProc // by role: miss, hit, s2, zstd, none
	gc    sidecarv1.SessionsClient
	hot   *store.Store // in process, near cache on
	// inproc are in-process stores without a near cache, by --compression:
	// the sidecar's own work per call (Redis round trip, validation, codec)
	// without the HTTP hop.
	inproc map[string]*store.Store
}

// benchSessions measures the sidecar binary (sidecarBin) as its own process
// against the out-of-process floor of the same run: raw go-redis plus the
// same-size loopback echo through a minimal server in its own process.
func benchSessions(sidecarBin string) error {
	if sidecarBin == "" {
		return fmt.Errorf("-sidecar-bin is required: the targets are judged on the sidecar process")
	}
	dir, err := os.MkdirTemp("", "sidecar-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rs, err := redistest.StartIn(dir, redistest.Options{})
	if err != nil {
		return err
	}
	defer rs.Kill()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := make([]byte, keys.KeySize)
	_, _ = crand.Read(key)
	ring, _ := keys.NewRing("k1", map[string][]byte{"k1": key})
	env := &sessionEnv{ctx: ctx, doc: chatJSON(1, 16<<10), procs: map[string]*sidecarProc{}}
	env.raw = redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1})
	defer env.raw.Close()
	if env.echo, err = startEcho(ctx, dir, len(env.doc)); err != nil {
		return err
	}
	defer env.echo.stop()
	for _, p := range []struct {
		role string
		o    procOptions
	}{
		{"miss", procOptions{ns: "bench-miss"}},
		{"hit", procOptions{ns: "bench-hit", nearBytes: 64 << 20}},
		{"s2", procOptions{ns: "bench-s2", compression: "s2"}},
		{"zstd", procOptions{ns: "bench-zstd", compression: "zstd"}},
		{"none", procOptions{ns: "bench-none", compression: "none"}},
	} {
		sp, err := startSidecarProc(ctx, sidecarBin, dir, rs.Addr, key, p.o)
		if err != nil {
			return err
		}
		defer sp.stop()
		env.procs[p.role] = sp
	}
	cc, err := grpc.NewClient(env.procs["miss"].grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	env.gc = sidecarv1.NewSessionsClient(cc)
	mkStore := func(comp frame.Compression, near int) (*store.Store, error) {
		codec, err := frame.New(ring, frame.Options{Tenant: "bench-inproc-" + string(comp), Compression: comp, UseDict: true})
		if err != nil {
			return nil, err
		}
		st, err := store.New(redis.NewClient(&redis.Options{Addr: rs.Addr, MaxRetries: -1}), codec,
			store.Options{NearCacheBytes: near, NearCacheMaxAge: time.Hour, RefreshOnRead: true})
		if err == nil {
			go st.Run(ctx, 250*time.Millisecond) // as the sidecar does
		}
		return st, err
	}
	if env.hot, err = mkStore(frame.CompressS2, 64<<20); err != nil {
		return err
	}
	env.inproc = map[string]*store.Store{}
	for _, c := range []frame.Compression{frame.CompressS2, frame.CompressZstd, frame.CompressNone} {
		if env.inproc[string(c)], err = mkStore(c, 0); err != nil {
			return err
		}
	}
	time.Sleep(300 * time.Millisecond) // let the near caches subscribe
	rows, err := env.rows()
	if err != nil {
		return err
	}
	if err := env.raw.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	rounds, per := envInt("NN_BENCH_ROUNDS", 10), envInt("NN_BENCH_OPS", 200)
	ops := make([]func() error, len(rows))
	for i, r := range rows {
		ops[i] = r.op
	}
	res, err := interleave(rounds, per, ops)
	if err != nil {
		return err
	}
	printSessions(rows, res, len(env.doc), rounds, per)
	if err := checkNearHits(env.procs["hit"]); err != nil {
		return err
	}
	if err := printCommandStats(ctx, env.raw); err != nil {
		return err
	}
	return benchFrames(ring)
}
