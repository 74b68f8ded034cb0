// Package lru is a map bounded by count that drops its least recently used entry first. Every
// operation is O(1), so a bounded table never pauses to sweep under its owner's lock.
//
// A Cache is not safe for concurrent use: its owner holds its own lock around it.
package lru

import "container/list"

// Cache maps K to V, holding at most Max entries.
type Cache[K comparable, V any] struct {
	max     int
	ll      *list.List // of *entry[K, V], most recent first
	m       map[K]*list.Element
	onEvict func(K, V)
}

type entry[K comparable, V any] struct {
	k K
	v V
}

// New returns a cache of at most max entries (max <= 0: unbounded). onEvict, when not nil, is
// called with each entry dropped to keep the bound or by RemoveOldest (not by Remove).
func New[K comparable, V any](max int, onEvict func(K, V)) *Cache[K, V] {
	return &Cache[K, V]{max: max, ll: list.New(), m: map[K]*list.Element{}, onEvict: onEvict}
}

// Get returns the value of k and marks it most recently used.
func (c *Cache[K, V]) Get(k K) (V, bool) {
	e, ok := c.m[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.ll.MoveToFront(e)
	return e.Value.(*entry[K, V]).v, true
}

// Peek returns the value of k without changing its recency.
func (c *Cache[K, V]) Peek(k K) (V, bool) {
	e, ok := c.m[k]
	if !ok {
		var zero V
		return zero, false
	}
	return e.Value.(*entry[K, V]).v, true
}

// Put sets k to v, marks it most recently used and, beyond the bound, drops the least recently
// used entries.
func (c *Cache[K, V]) Put(k K, v V) {
	if e, ok := c.m[k]; ok {
		e.Value.(*entry[K, V]).v = v
		c.ll.MoveToFront(e)
		return
	}
	c.m[k] = c.ll.PushFront(&entry[K, V]{k: k, v: v})
	for c.max > 0 && c.ll.Len() > c.max {
		c.RemoveOldest()
	}
}

// Remove drops k and returns its value; onEvict is not called.
func (c *Cache[K, V]) Remove(k K) (V, bool) {
	e, ok := c.m[k]
	if !ok {
		var zero V
		return zero, false
	}
	c.ll.Remove(e)
	delete(c.m, k)
	return e.Value.(*entry[K, V]).v, true
}

// Oldest returns the least recently used entry.
func (c *Cache[K, V]) Oldest() (K, V, bool) {
	e := c.ll.Back()
	if e == nil {
		var k K
		var v V
		return k, v, false
	}
	en := e.Value.(*entry[K, V])
	return en.k, en.v, true
}

// RemoveOldest drops the least recently used entry, calling onEvict with it.
func (c *Cache[K, V]) RemoveOldest() {
	e := c.ll.Back()
	if e == nil {
		return
	}
	en := e.Value.(*entry[K, V])
	c.ll.Remove(e)
	delete(c.m, en.k)
	if c.onEvict != nil {
		c.onEvict(en.k, en.v)
	}
}

// Len is the number of entries held.
func (c *Cache[K, V]) Len() int { return c.ll.Len() }
