package lru

import (
	"reflect"
	"testing"
)

func TestCacheBoundAndOrder(t *testing.T) {
	var evicted []string
	c := New[string, int](3, func(k string, _ int) { evicted = append(evicted, k) })
	c.Put("a", 1)
	c.Put("b", 2)
	c.Put("c", 3)
	if _, ok := c.Get("a"); !ok { // a is now the most recent: b is the oldest
		t.Fatal("a missing")
	}
	c.Put("d", 4)
	if c.Len() != 3 {
		t.Fatalf("len = %d at the bound of 3", c.Len())
	}
	if _, ok := c.Peek("b"); ok {
		t.Fatal("b (least recently used) kept beyond the bound")
	}
	c.Put("c", 30) // replace: no eviction, c most recent
	if k, v, _ := c.Oldest(); k != "a" || v != 1 {
		t.Fatalf("oldest = %s:%d, want a:1", k, v)
	}
	if v, ok := c.Remove("a"); !ok || v != 1 {
		t.Fatalf("remove a = %d %v", v, ok)
	}
	c.RemoveOldest()
	if !reflect.DeepEqual(evicted, []string{"b", "d"}) {
		t.Fatalf("evicted %v, want [b d] (Remove does not call onEvict)", evicted)
	}
	if v, ok := c.Peek("c"); !ok || v != 30 || c.Len() != 1 {
		t.Fatalf("left c=%d %v len %d", v, ok, c.Len())
	}
}

func TestCacheUnbounded(t *testing.T) {
	c := New[int, int](0, nil)
	for i := 0; i < 1000; i++ {
		c.Put(i, i)
	}
	if c.Len() != 1000 {
		t.Fatalf("len = %d", c.Len())
	}
	c.RemoveOldest()
	if _, ok := c.Peek(0); ok {
		t.Fatal("oldest kept")
	}
}
