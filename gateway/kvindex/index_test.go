package kvindex

import (
	"testing"

	"github.com/neuronetes/neuronetes/demoagent/kvcache"
	"github.com/neuronetes/neuronetes/demoagent/tokenize"
	"github.com/neuronetes/neuronetes/gateway/kvevents"
	"github.com/neuronetes/neuronetes/gateway/openai"
)

func intHashes(raw []uint64) []kvevents.Hash {
	out := make([]kvevents.Hash, len(raw))
	for i, x := range raw {
		out[i] = kvevents.IntHash(x)
	}
	return out
}

func stored(bs int, hs ...kvevents.Hash) kvevents.Event {
	return kvevents.Event{Kind: kvevents.TagBlockStored, Hashes: hs, BlockSize: bs}
}

func msg(seq uint64, evs ...kvevents.Event) kvevents.Message {
	return kvevents.Message{Seq: seq, Batch: kvevents.Batch{Events: evs, DPRank: -1}}
}

// TestIndexApply plays sequences of connections and messages and checks each pod's match of a
// 4-block prompt, whether it is exact, and what each message did.
func TestIndexApply(t *testing.T) {
	tokens := make([]uint64, 64)
	for i := range tokens {
		tokens[i] = uint64(i)
	}
	p := &Prompt{tokens: tokens}
	h := p.Hashes(16)
	type op struct {
		connect bool
		m       kvevents.Message
		want    Result
	}
	cases := []struct {
		name      string
		ops       []op
		wantMatch int
		wantExact bool
	}{
		{"never connected", nil, 0, false},
		{"connected, nothing published: not exact", []op{{connect: true}}, 0, false},
		{"stored chain matches", []op{{connect: true}, {m: msg(0, stored(16, h[0], h[1], h[2])), want: Applied}}, 3, true},
		{"a removed middle block cuts the prefix", []op{{connect: true},
			{m: msg(5, stored(16, h...)), want: Applied},
			{m: msg(6, kvevents.Event{Kind: kvevents.TagBlockRemoved, Hashes: h[1:2]}), want: Applied}}, 1, true},
		{"all blocks cleared", []op{{connect: true}, {m: msg(0, stored(16, h...)), want: Applied},
			{m: msg(1, kvevents.Event{Kind: kvevents.TagAllBlocksCleared}), want: Applied}}, 0, true},
		{"a sequence gap clears the pod, then applies the batch", []op{{connect: true},
			{m: msg(0, stored(16, h...)), want: Applied},
			{m: msg(2, stored(16, h[0])), want: Gap}}, 1, true},
		{"a sequence going back (engine restart) is a gap", []op{{connect: true},
			{m: msg(9, stored(16, h...)), want: Applied},
			{m: msg(0, stored(16, h[0], h[1])), want: Gap}}, 2, true},
		{"a reconnect clears and restarts the sequence", []op{{connect: true},
			{m: msg(3, stored(16, h...)), want: Applied}, {connect: true},
			{m: msg(40, stored(16, h[0])), want: Applied}}, 1, true},
		{"offloaded (CPU) blocks are not the device cache", []op{{connect: true},
			{m: msg(0, kvevents.Event{Kind: kvevents.TagBlockStored, Hashes: h, BlockSize: 16, Medium: "CPU"}), want: Applied}}, 0, false},
		{"another block size hashes the prompt again", []op{{connect: true},
			{m: msg(0, stored(32, p.Hashes(32)[0])), want: Applied}}, 1, true},
		{"more blocks than the bound clear the pod", []op{{connect: true},
			{m: msg(0, stored(16, h...)), want: Applied},
			{m: msg(1, stored(16, intHashes([]uint64{1, 2, 3, 4, 5, 6, 7})...)), want: Overflow}}, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := &Index{MaxBlocks: 10}
			for i, o := range c.ops {
				if o.connect {
					x.Connected("pod")
					continue
				}
				if got := x.Apply("pod", o.m); got != o.want {
					t.Errorf("op %d: result %v, want %v", i, got, o.want)
				}
			}
			n, _, exact := x.Match("pod", p)
			if n != c.wantMatch || exact != c.wantExact {
				t.Errorf("match %d exact %v, want %d %v", n, exact, c.wantMatch, c.wantExact)
			}
		})
	}
}

// TestForgetIgnoresLateMessages checks that a pod removed from the table is not brought back by
// a message that was on its way.
func TestForgetIgnoresLateMessages(t *testing.T) {
	x := &Index{}
	x.Connected("pod")
	x.Forget("pod")
	x.Apply("pod", msg(0, stored(16, kvevents.IntHash(1))))
	if x.Exact("pod") || x.Blocks("pod") != 0 {
		t.Fatal("a forgotten pod came back")
	}
}

// TestDemoPromptMatchesAgent checks that the gateway tokenizes and hashes a chat request exactly
// as the demo agent does (the same template, tool calls as text, parts joined).
func TestDemoPromptMatchesAgent(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"system","content":"be brief"},` +
		`{"role":"user","content":[{"type":"text","text":"hello there"},{"type":"text","text":"general"}]},` +
		`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"42"}]}`
	r, err := openai.Parse(openai.RouteChat, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	got := DemoPrompt(r)
	want := tokenize.Chat([]tokenize.Message{{Role: "system", Text: "be brief"}, {Role: "user", Text: "hello there general"},
		{Role: "assistant", Text: "f {\"a\":1}"}, {Role: "tool", Text: "42"}})
	if got.Tokens() != len(want) {
		t.Fatalf("%d tokens, want %d", got.Tokens(), len(want))
	}
	wantH := intHashes(kvcache.BlockHashes(want, 4))
	gotH := got.Hashes(4)
	if len(gotH) != len(wantH) || len(gotH) == 0 {
		t.Fatalf("%d hashes, want %d (> 0)", len(gotH), len(wantH))
	}
	for i := range wantH {
		if gotH[i] != wantH[i] {
			t.Fatalf("hash %d differs", i)
		}
	}
	c, err := openai.Parse(openai.RouteCompletions, []byte(`{"model":"m","prompt":"a b c"}`))
	if err != nil {
		t.Fatal(err)
	}
	if DemoPrompt(c).Tokens() != 3 {
		t.Fatalf("completions prompt: %d tokens, want 3", DemoPrompt(c).Tokens())
	}
}
