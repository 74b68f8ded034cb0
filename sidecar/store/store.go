package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/sidecar/frame"
)

// Options configure a Store.
type Options struct {
	// DefaultTTL applies when a write names no TTL (0: 24h).
	DefaultTTL time.Duration
	// MaxTTL caps per-entry TTLs (0: 30 days).
	MaxTTL time.Duration
	// MaxSize bounds the plaintext JSON of one session in bytes (0: 1 MiB).
	MaxSize int
	// RefreshOnRead resets an entry's TTL to its own TTL on every read.
	RefreshOnRead bool
	// NearCacheBytes enables the near cache with this budget (0: off).
	NearCacheBytes int
	// NearCacheMaxAge bounds how long a near-cache entry is trusted without
	// Redis (0: 5s); it limits staleness if invalidations are ever missed.
	NearCacheMaxAge time.Duration
	// AppendRetries bounds CAS retries of one Append (0: 100).
	AppendRetries int
	// Observer receives per-operation timings and outcomes (may be nil).
	Observer Observer
}

// Observer is told about Redis calls and near-cache lookups (for metrics).
type Observer interface {
	RedisCall(op string, d time.Duration, err error)
	NearCacheLookup(hit bool)
}

// Session is one stored session document.
type Session struct {
	// Version grows with every write of the session, also across a Redis
	// restored from an older snapshot, and never repeats for its id, also
	// after a delete (versionClock, putScript).
	Version int64
	// Data is the session's JSON object.
	Data []byte
	// TTL is the entry's own time to live.
	TTL time.Duration
}

// Store reads and writes one tenant's sessions. It is safe for concurrent use.
type Store struct {
	rdb    redis.UniversalClient
	codec  *frame.Codec
	opts   Options
	tenant string
	near   *nearCache
	// refresher defers refresh-on-read TTL resets (refresh.go).
	refresher refresher
	// clock proposes the versions of writes (version.go).
	clock versionClock
}

// New returns a store for codec's tenant on rdb. Call Run to start the near
// cache's invalidation listener and TTL refresher when NearCacheBytes > 0.
func New(rdb redis.UniversalClient, codec *frame.Codec, opts Options) (*Store, error) {
	if !ValidTenant(codec.Tenant()) {
		return nil, fmt.Errorf("tenant %q: %w", codec.Tenant(), ErrBadID)
	}
	if opts.DefaultTTL <= 0 {
		opts.DefaultTTL = 24 * time.Hour
	}
	if opts.MaxTTL <= 0 {
		opts.MaxTTL = 30 * 24 * time.Hour
	}
	if opts.MaxSize <= 0 {
		opts.MaxSize = 1 << 20
	}
	if opts.NearCacheMaxAge <= 0 {
		opts.NearCacheMaxAge = 5 * time.Second
	}
	if opts.AppendRetries <= 0 {
		opts.AppendRetries = 100
	}
	s := &Store{rdb: rdb, codec: codec, opts: opts, tenant: codec.Tenant()}
	s.clock.now = time.Now
	if opts.NearCacheBytes > 0 {
		s.near = newNearCache(opts.NearCacheBytes, opts.NearCacheMaxAge)
	}
	return s, nil
}

// MaxSize returns the session size limit in bytes.
func (s *Store) MaxSize() int { return s.opts.MaxSize }

// Key returns the Redis key of a session: nn:{<tenant>}:sess:<id>.
func (s *Store) Key(id string) string { return "nn:{" + s.tenant + "}:sess:" + id }

// seqKey is the tenant's version floor: the highest version a delete used
// (the name is kept from the counter it once was; its values are still a
// valid floor).
func (s *Store) seqKey() string  { return "nn:{" + s.tenant + "}:seq" }
func (s *Store) channel() string { return "nn:{" + s.tenant + "}:inval" }

func (s *Store) observe(op string, start time.Time, err error) {
	if s.opts.Observer != nil {
		s.opts.Observer.RedisCall(op, time.Since(start), err)
	}
}

func (s *Store) ttl(d time.Duration) (time.Duration, error) {
	switch {
	case d == 0:
		return s.opts.DefaultTTL, nil
	case d < time.Millisecond || d > s.opts.MaxTTL:
		return 0, fmt.Errorf("ttl %s: must be within [1ms, %s]: %w", d, s.opts.MaxTTL, ErrBadDocument)
	}
	return d, nil
}

// Get returns a session. It refreshes the entry's TTL when RefreshOnRead is set.
func (s *Store) Get(ctx context.Context, id string) (*Session, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("conversation id %q: %w", id, ErrBadID)
	}
	if s.near != nil {
		if sess, ok := s.nearGet(id); ok {
			return sess, nil
		}
	}
	gen := s.near.generation()
	start := time.Now()
	// Plain commands, one round trip: HMGET (no Lua: a script carrying the
	// frame costs Redis ~10 µs more) and, for refresh-on-read or the near
	// cache, PTTL.
	var fields *redis.SliceCmd
	var left *redis.DurationCmd
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		fields = p.HMGet(ctx, s.Key(id), "v", "d", "t")
		if s.opts.RefreshOnRead || s.near != nil {
			left = p.PTTL(ctx, s.Key(id))
		}
		return nil
	})
	s.observe("get", start, err)
	if err != nil {
		return nil, classify("get", err)
	}
	res := fields.Val()
	if len(res) != 3 {
		return nil, fmt.Errorf("get %q: unexpected reply %v", id, res)
	}
	if res[0] == nil || res[1] == nil {
		return nil, fmt.Errorf("conversation %q: %w", id, ErrNotFound)
	}
	ver, err1 := parseInt(res[0])
	ttlMs, err2 := parseInt(res[2])
	raw, _ := res[1].(string)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("get %q: malformed entry (version %v, ttl %v): %w", id, res[0], res[2], frame.ErrMalformed)
	}
	s.clock.observe(ver)
	if s.opts.RefreshOnRead {
		s.refreshOnRead(ctx, id, left.Val())
	}
	data, err := s.codec.Open(frame.Binding{Kind: "sess", ID: id, Version: ver}, []byte(raw))
	if err != nil {
		return nil, fmt.Errorf("conversation %q version %d: %w", id, ver, err)
	}
	sess := &Session{Version: ver, Data: data, TTL: time.Duration(ttlMs) * time.Millisecond}
	if s.near != nil {
		s.near.put(id, sess, deadline(start, left.Val()), gen)
	}
	return sess, nil
}

// nearGet serves id from the near cache. Under refresh-on-read, an entry
// whose key is close to expiry is not served: the read goes to Redis, which
// refreshes the TTL at once (refreshOnRead), since a deferred touch might
// land after the key expired.
func (s *Store) nearGet(id string) (*Session, bool) {
	e, ok := s.near.get(id)
	if ok && s.opts.RefreshOnRead && !e.deadline.IsZero() && !s.refresher.deferOK(time.Until(e.deadline)) {
		ok = false
	}
	s.nearObserve(ok)
	if !ok {
		return nil, false
	}
	if s.opts.RefreshOnRead {
		s.refresher.touch(id)
	}
	return &Session{Version: e.version, Data: e.data, TTL: e.ttl}, true
}

// deadline returns when a key whose PTTL was left, read by a call sent at
// start, expires at the earliest (zero when it has no expiry).
func deadline(start time.Time, left time.Duration) time.Time {
	if left < 0 { // -1: no expiry (-2, missing, is never cached)
		return time.Time{}
	}
	return start.Add(left)
}

// refreshOnRead resets a just-read entry's TTL: deferred to the batched
// refresher when the entry has ample time left, else at once (touchScript
// re-reads the entry's own TTL, so a write racing with the read is honoured).
func (s *Store) refreshOnRead(ctx context.Context, id string, left time.Duration) {
	if s.refresher.deferOK(left) {
		s.refresher.touch(id)
		return
	}
	start := time.Now()
	err := touchScript.Run(ctx, s.rdb, []string{s.Key(id)}).Err()
	s.observe("touch", start, err)
	if err != nil {
		// The read itself succeeded; a failed refresh only shortens the
		// entry's life to its previous TTL.
		klog.FromContext(ctx).V(2).Info("ttl refresh failed", "conversation", id, "err", err)
	}
}

func parseInt(v any) (int64, error) {
	str, ok := v.(string)
	if !ok {
		return 0, fmt.Errorf("%v: not a string", v)
	}
	return strconv.ParseInt(str, 10, 64)
}

func (s *Store) nearObserve(hit bool) {
	if s.opts.Observer != nil {
		s.opts.Observer.NearCacheLookup(hit)
	}
}

// Put writes a session. ifVersion < 0 writes unconditionally, 0 only creates,
// and > 0 writes only if that is the current version (else ErrConflict).
// ttl 0 means the default TTL. It returns the new version.
func (s *Store) Put(ctx context.Context, id string, data []byte, ifVersion int64, ttl time.Duration) (int64, error) {
	if !ValidID(id) {
		return 0, fmt.Errorf("conversation id %q: %w", id, ErrBadID)
	}
	if len(data) > s.opts.MaxSize {
		return 0, fmt.Errorf("session %d bytes over %d: %w", len(data), s.opts.MaxSize, ErrTooLarge)
	}
	if !IsObject(data) {
		return 0, fmt.Errorf("body: must be a JSON object: %w", ErrBadDocument)
	}
	return s.put(ctx, id, data, ifVersion, ttl)
}

// proposalRetries bounds how often one write proposes a new version after
// Redis answered that a newer one exists (another writer's clock is ahead).
const proposalRetries = 8

// put writes data, which the caller has validated as a JSON object.
func (s *Store) put(ctx context.Context, id string, data []byte, ifVersion int64, ttl time.Duration) (int64, error) {
	if len(data) > s.opts.MaxSize {
		return 0, fmt.Errorf("session %d bytes over %d: %w", len(data), s.opts.MaxSize, ErrTooLarge)
	}
	ttl, err := s.ttl(ttl)
	if err != nil {
		return 0, err
	}
	expect := ""
	if ifVersion >= 0 {
		expect = strconv.FormatInt(ifVersion, 10)
	}
	for range proposalRetries {
		// The frame binds its version, so each proposal is sealed anew.
		nv := s.clock.next()
		f, err := s.codec.Seal(frame.Binding{Kind: "sess", ID: id, Version: nv}, data)
		if err != nil {
			return 0, fmt.Errorf("seal %q: %w", id, err)
		}
		start := time.Now()
		res, err := s.writeStaged(ctx, id, f, expect, ttl, nv)
		s.observe("put", start, err)
		if err != nil {
			return 0, classify("put", err)
		}
		switch {
		case len(res) != 2:
			return 0, fmt.Errorf("put %q: unexpected reply %v", id, res)
		case res[0] == -2:
			s.clock.observe(res[1])
			continue
		case res[0] == 0:
			s.clock.observe(res[1])
			return res[1], fmt.Errorf("conversation %q at version %d, not %d: %w", id, res[1], ifVersion, ErrConflict)
		case res[0] != 1:
			return 0, fmt.Errorf("put %q: the staged write expired before it was applied: %w", id, ErrUnavailable)
		}
		if s.near != nil { // the copy is only needed by the near cache
			s.near.put(id, &Session{Version: res[1], Data: append([]byte(nil), data...), TTL: ttl}, start.Add(ttl), s.near.generation())
		}
		return res[1], nil
	}
	return 0, fmt.Errorf("put %q: %d proposed versions were overtaken: %w", id, proposalRetries, ErrConflict)
}

// Delete removes a session; ifVersion >= 0 makes it conditional.
func (s *Store) Delete(ctx context.Context, id string, ifVersion int64) error {
	if !ValidID(id) {
		return fmt.Errorf("conversation id %q: %w", id, ErrBadID)
	}
	expect := ""
	if ifVersion >= 0 {
		expect = strconv.FormatInt(ifVersion, 10)
	}
	for range proposalRetries {
		tomb := strconv.FormatInt(s.clock.next(), 10)
		start := time.Now()
		res, err := delScript.Run(ctx, s.rdb, []string{s.Key(id), s.seqKey()}, expect, id, s.channel(), tomb).Int64Slice()
		s.observe("delete", start, err)
		if err != nil {
			return classify("delete", err)
		}
		switch {
		case len(res) != 2:
			return fmt.Errorf("delete %q: unexpected reply %v", id, res)
		case res[0] == -2:
			s.clock.observe(res[1])
			continue
		case res[0] == -1:
			return fmt.Errorf("conversation %q: %w", id, ErrNotFound)
		case res[0] == 0:
			s.clock.observe(res[1])
			return fmt.Errorf("conversation %q at version %d, not %d: %w", id, res[1], ifVersion, ErrConflict)
		}
		s.near.invalidate(id, res[1])
		return nil
	}
	return fmt.Errorf("delete %q: %d proposed versions were overtaken: %w", id, proposalRetries, ErrConflict)
}

// Append adds one turn (a JSON object) to the session's "turns" array,
// creating the session if needed. Concurrent appends never lose a turn: each
// attempt is a CAS on the version it read, retried on conflict.
func (s *Store) Append(ctx context.Context, id string, turn []byte, ttl time.Duration) (int64, error) {
	if !IsObject(turn) {
		return 0, fmt.Errorf("turn: must be a JSON object: %w", ErrBadDocument)
	}
	log := klog.FromContext(ctx)
	for attempt := 0; attempt < s.opts.AppendRetries; attempt++ {
		cur, err := s.Get(ctx, id)
		base, ver := []byte(`{}`), int64(0)
		switch {
		case err == nil:
			base, ver = cur.Data, cur.Version
			if ttl == 0 {
				ttl = cur.TTL
			}
		case !errors.Is(err, ErrNotFound):
			return 0, err
		}
		doc, err := appendTurn(base, turn)
		if err != nil {
			return 0, err
		}
		if !ValidID(id) {
			return 0, fmt.Errorf("conversation id %q: %w", id, ErrBadID)
		}
		nv, err := s.put(ctx, id, doc, ver, ttl) // doc was produced by json.Marshal
		if !errors.Is(err, ErrConflict) {
			return nv, err
		}
		// Redis holds another version than the one read, or none (deleted
		// or evicted without a message): the cached entry is stale whatever
		// its version, so the retry reads Redis.
		s.near.forget(id)
		if nv > 0 {
			s.near.invalidate(id, nv)
		}
		log.V(5).Info("append conflict, retrying", "conversation", id, "attempt", attempt, "version", ver)
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(time.Duration(rand.IntN(1000*(attempt+1))) * time.Microsecond):
		}
	}
	return 0, fmt.Errorf("append %q: %d attempts: %w", id, s.opts.AppendRetries, ErrConflict)
}

// IsObject reports whether b is one valid JSON object. It scans without
// building a map (validJSON, which agrees with json.Valid), so validating a
// large session stays cheap.
func IsObject(b []byte) bool {
	i := skipWS(b, 0)
	return i < len(b) && b[i] == '{' && validJSON(b)
}

func appendTurn(doc, turn []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(doc, &m); err != nil || m == nil {
		return nil, fmt.Errorf("stored session is not a JSON object: %w", ErrBadDocument)
	}
	var turns []json.RawMessage
	if raw, ok := m["turns"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &turns); err != nil {
			return nil, fmt.Errorf("field turns: not an array: %w", ErrBadDocument)
		}
	}
	ts, err := json.Marshal(append(turns, json.RawMessage(turn)))
	if err != nil {
		return nil, fmt.Errorf("turn: %v: %w", err, ErrBadDocument)
	}
	m["turns"] = ts
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode session: %w", err)
	}
	return out, nil
}
