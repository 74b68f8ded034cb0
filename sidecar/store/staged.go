package store

import (
	"context"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// stagePrefix makes this process's staging keys unique among every
// writer's: a random prefix per process, then a counter.
var (
	stagePrefix = func() string {
		var b [8]byte
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		return hex.EncodeToString(b[:])
	}()
	stageSeq atomic.Uint64
)

func (s *Store) stageKey() string {
	return "nn:{" + s.tenant + "}:stage:" + stagePrefix + "." + strconv.FormatUint(stageSeq.Add(1), 10)
}

// writeStaged writes frame f for id at proposed version nv in one round trip: the frame and TTL go
// into a staging hash by plain commands (with a safety TTL), and putScript
// checks the version and moves the staging hash into place. When Redis does
// not know the script yet (NOSCRIPT), it loads it and sends the pipeline
// once more (the staging hash is written again under the same key).
func (s *Store) writeStaged(ctx context.Context, id string, f []byte, expect string, ttl time.Duration, nv int64) ([]int64, error) {
	stage := s.stageKey()
	keys := []string{s.Key(id), s.seqKey(), stage}
	var staged *redis.IntCmd
	send := func() *redis.Cmd {
		var res *redis.Cmd
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			staged = p.HSet(ctx, stage, "d", f, "t", ttl.Milliseconds())
			p.PExpire(ctx, stage, stagingTTL)
			res = putScript.EvalSha(ctx, p, keys, expect, ttl.Milliseconds(), id, s.channel(), strconv.FormatInt(nv, 10))
			return nil
		})
		return res
	}
	res := send()
	if err := res.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		if err := putScript.Load(ctx, s.rdb).Err(); err != nil {
			return nil, err
		}
		res = send()
	}
	if err := staged.Err(); err != nil {
		// The frame never reached Redis (e.g. OOM at maxmemory): that error,
		// not the script's "staging hash gone", says why.
		return nil, err
	}
	return res.Int64Slice()
}
