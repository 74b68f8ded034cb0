package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/kvevents"
	"github.com/neuronetes/neuronetes/gateway/kvindex"
	"github.com/neuronetes/neuronetes/gateway/openai"
)

// TestExactIndexRoutesToTheCacheHolder: with the exact KV index on, a request goes to the pod
// whose published cache holds its prompt's prefix, although the name order (the tie-break
// without an index) would choose the other.
func TestExactIndexRoutesToTheCacheHolder(t *testing.T) {
	a, b := newBackend(t), newBackend(t)
	for _, x := range []*backend{a, b} {
		x.set(streamTokens(2, 0))
	}
	h := newHarness(t, a, b)
	holder, other := 1, 0
	if h.pool.Endpoints[0].Pod > h.pool.Endpoints[1].Pod {
		holder, other = 0, 1
	}
	words := make([]string, 200)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i)
	}
	body := `{"model":"m","stream":true,"max_tokens":2,"messages":[{"role":"user","content":"` + strings.Join(words, " ") + `"}]}`
	req, err := openai.Parse(openai.RouteChat, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	x := &kvindex.Index{}
	for i := range h.pool.Endpoints {
		h.pool.Endpoints[i].KVEvents = fmt.Sprintf("tcp://pod%d:5557", i)
		x.Connected(h.pool.Endpoints[i].KVEvents)
		hs := []kvevents.Hash{kvevents.IntHash(99)} // every pod has published: both are exact
		if i == holder {
			hs = kvindex.DemoPrompt(req).Hashes(16)
		}
		x.Apply(h.pool.Endpoints[i].KVEvents, kvevents.Message{Batch: kvevents.Batch{Events: []kvevents.Event{
			{Kind: kvevents.TagBlockStored, Hashes: hs, BlockSize: 16}}}})
	}
	h.e.Picker.KV = x
	h.e.KVPrompt = kvindex.DemoPrompt
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := h.do(ctx, tenant("t", access.Quota{}), nil, body)
	_ = s.text()
	byName := map[string]*backend{a.name: a, b.name: b}
	hb, ob := byName[h.pool.Endpoints[holder].Pod], byName[h.pool.Endpoints[other].Pod]
	if hb.count() != 1 || ob.count() != 0 {
		t.Fatalf("holder got %d requests, other %d; want 1 and 0", hb.count(), ob.count())
	}
}
