package sessionroute

import "sync"

// Changes wakes the requests held for a session when the gateway's informers see a change of it
// (the AgentSession, or a pod labelled with it): gateway/kube.NotifySessionChanges calls Notify
// from the informers' event handlers, after the cache holds the change. The zero value is
// ready to use.
type Changes struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

// Subscribe returns a channel that receives (at most one pending value) after each change of
// session namespace/name, and the function that ends the subscription.
func (c *Changes) Subscribe(namespace, name string) (<-chan struct{}, func()) {
	key := namespace + "/" + name
	ch := make(chan struct{}, 1)
	c.mu.Lock()
	if c.subs == nil {
		c.subs = map[string]map[chan struct{}]struct{}{}
	}
	if c.subs[key] == nil {
		c.subs[key] = map[chan struct{}]struct{}{}
	}
	c.subs[key][ch] = struct{}{}
	c.mu.Unlock()
	return ch, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		delete(c.subs[key], ch)
		if len(c.subs[key]) == 0 {
			delete(c.subs, key)
		}
	}
}

// Notify wakes every subscriber of session namespace/name; it never blocks.
func (c *Changes) Notify(namespace, name string) {
	if c == nil || name == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for ch := range c.subs[namespace+"/"+name] {
		select {
		case ch <- struct{}{}:
		default: // a wake is already pending
		}
	}
}

// held counts the subscriptions of session namespace/name (tests).
func (c *Changes) held(namespace, name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.subs[namespace+"/"+name])
}
