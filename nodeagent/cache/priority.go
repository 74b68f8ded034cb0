package cache

import "context"

// Fetch slots. Opportunistic prewarm (Models no pod on the node uses yet) takes one of the
// MaxConcurrent shared slots, in turn. A fetch of a pinned digest (a pod bound to this node uses it)
// or one marked Request.Urgent takes one of MaxConcurrent slots of its own instead, so a bind never
// waits behind prewarm: binding is what starts the fetch. A prewarm still queued for a shared slot
// when a pod pins its digest (Pin, SetPins) moves to the urgent slots at once.

// promoteLocked moves a fetch of hex that waits for a shared slot to the urgent slots.
func (s *Store) promoteLocked(hex string) {
	if ch, ok := s.promote[hex]; ok {
		close(ch)
		delete(s.promote, hex)
	}
}

// Queued reports whether a fetch of hex waits for a shared slot (tests).
func (s *Store) Queued(hex string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.promote[hex]
	return ok
}

// acquire takes a fetch slot for hex and returns its release.
func (s *Store) acquire(ctx context.Context, hex string, urgent bool) (func(), error) {
	s.mu.Lock()
	if len(s.pins[hex]) > 0 {
		urgent = true
	}
	var promoted chan struct{}
	if !urgent {
		promoted = make(chan struct{})
		s.promote[hex] = promoted
	}
	s.mu.Unlock()
	if !urgent {
		forget := func() {
			s.mu.Lock()
			if s.promote[hex] == promoted {
				delete(s.promote, hex)
			}
			s.mu.Unlock()
		}
		select {
		case s.sem <- struct{}{}:
			forget()
			return func() { <-s.sem }, nil
		case <-promoted:
		case <-ctx.Done():
			forget()
			return nil, ctx.Err()
		}
	}
	select {
	case s.urgentSem <- struct{}{}:
		return func() { <-s.urgentSem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
