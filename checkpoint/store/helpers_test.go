package store

import (
	"bytes"
	"context"
	"encoding/json"
)

func rewriteManifest(ctx context.Context, s *Store, m *Manifest) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return s.b.Put(ctx, manifestKey(m.Agent, m.ID), bytes.NewReader(b), int64(len(b)))
}

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }
