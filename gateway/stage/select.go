package stage

import (
	"context"
	"errors"
	"hash/fnv"
)

// DefaultSelector is the VariantSelector used when none is configured: among the candidates with
// ready endpoints (all of them when none has any), a request with a session key goes to the
// candidate its key hashes to (rendezvous hashing: a conversation stays on one pool while the
// set of pools is unchanged), and a request without one to the candidate with the most ready
// endpoints (the first in order on a tie).
type DefaultSelector struct{}

// Select implements VariantSelector.
func (DefaultSelector) Select(_ context.Context, req *Request) (PoolRef, error) {
	if len(req.Candidates) == 0 {
		return PoolRef{}, errors.New("no candidate pools")
	}
	cands := make([]Candidate, 0, len(req.Candidates))
	for _, c := range req.Candidates {
		if c.Ready > 0 {
			cands = append(cands, c)
		}
	}
	if len(cands) == 0 {
		cands = req.Candidates
	}
	if len(cands) == 1 {
		return cands[0].Pool, nil
	}
	if req.SessionKey == "" {
		best := cands[0]
		for _, c := range cands[1:] {
			if c.Ready > best.Ready {
				best = c
			}
		}
		return best.Pool, nil
	}
	var best PoolRef
	var bestH uint64
	for i, c := range cands {
		h := fnv.New64a()
		_, _ = h.Write([]byte(req.SessionKey))
		_, _ = h.Write([]byte{0})
		_, _ = h.Write([]byte(c.Pool.String()))
		if v := h.Sum64(); i == 0 || v > bestH {
			best, bestH = c.Pool, v
		}
	}
	return best, nil
}
