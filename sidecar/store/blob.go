package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/neuronetes/neuronetes/sidecar/frame"
)

// BlobStore keeps small sealed values (embeddings) of one kind in Redis
// under nn:{<tenant>}:<kind>:<id>, with a TTL. It implements vector.Remote.
type BlobStore struct {
	s    *Store
	kind string
}

// Blobs returns a BlobStore for kind ("emb") sharing the store's client and codec.
func (s *Store) Blobs(kind string) *BlobStore { return &BlobStore{s: s, kind: kind} }

func (b *BlobStore) key(id string) string { return "nn:{" + b.s.tenant + "}:" + b.kind + ":" + id }

// GetBlob returns the opened blob; ErrNotFound when absent.
func (b *BlobStore) GetBlob(ctx context.Context, id string) ([]byte, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("%s id %q: %w", b.kind, id, ErrBadID)
	}
	start := time.Now()
	raw, err := b.s.rdb.Get(ctx, b.key(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		b.s.observe(b.kind+"_get", start, nil)
		return nil, fmt.Errorf("%s %q: %w", b.kind, id, ErrNotFound)
	}
	b.s.observe(b.kind+"_get", start, err)
	if err != nil {
		return nil, classify(b.kind+"_get", err)
	}
	out, err := b.s.codec.Open(frame.Binding{Kind: b.kind, ID: id}, raw)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", b.kind, id, err)
	}
	return out, nil
}

// PutBlob seals and stores data under id with ttl.
func (b *BlobStore) PutBlob(ctx context.Context, id string, data []byte, ttl time.Duration) error {
	if !ValidID(id) {
		return fmt.Errorf("%s id %q: %w", b.kind, id, ErrBadID)
	}
	f, err := b.s.codec.Seal(frame.Binding{Kind: b.kind, ID: id}, data)
	if err != nil {
		return fmt.Errorf("seal %s %q: %w", b.kind, id, err)
	}
	start := time.Now()
	err = b.s.rdb.Set(ctx, b.key(id), f, ttl).Err()
	b.s.observe(b.kind+"_put", start, err)
	return classify(b.kind+"_put", err)
}

// IsMiss reports whether err means the blob is absent.
func (b *BlobStore) IsMiss(err error) bool { return errors.Is(err, ErrNotFound) }
