package kvindex

import (
	"bytes"
	"encoding/json"
	"sync"

	"github.com/neuronetes/neuronetes/demoagent/kvcache"
	"github.com/neuronetes/neuronetes/demoagent/tokenize"
	"github.com/neuronetes/neuronetes/gateway/kvevents"
	"github.com/neuronetes/neuronetes/gateway/openai"
)

// HashDemo names the demo agent's hashing: its tokenizer and chat template
// (demoagent/tokenize) and its chained block hash (kvcache.BlockHashes), published as integers.
// It is the only engine hashing the gateway implements: vLLM hashes token ids with its own
// algorithm and seed (--prefix-caching-hash-algo, PYTHONHASHSEED) over its model's tokenizer,
// which the gateway does not have, so vLLM pods are not indexed exactly.
const HashDemo = "demo"

// Prompt is one request's tokens as the engine sees them, with their block hashes computed on
// demand per block size.
type Prompt struct {
	tokens []uint64

	mu     sync.Mutex
	hashes map[int][]kvevents.Hash
}

// Tokens is the prompt's length in tokens.
func (p *Prompt) Tokens() int { return len(p.tokens) }

// Hashes returns the hashes of the prompt's full blocks of blockSize tokens.
func (p *Prompt) Hashes(blockSize int) []kvevents.Hash {
	p.mu.Lock()
	defer p.mu.Unlock()
	if h, ok := p.hashes[blockSize]; ok {
		return h
	}
	raw := kvcache.BlockHashes(p.tokens, blockSize)
	out := make([]kvevents.Hash, len(raw))
	for i, x := range raw {
		out[i] = kvevents.IntHash(x)
	}
	if p.hashes == nil {
		p.hashes = map[int][]kvevents.Hash{}
	}
	p.hashes[blockSize] = out
	return out
}

// DemoPrompt tokenizes a request as the demo agent does: a chat request's messages through the
// chat template (a message's text parts and each tool call's name and arguments as its text), a
// completions prompt as plain text. Embeddings are not prefix-cached: nil.
func DemoPrompt(r *openai.Request) *Prompt {
	switch r.Route {
	case openai.RouteChat:
		msgs := make([]tokenize.Message, len(r.Messages))
		for i, m := range r.Messages {
			text := contentText(m)
			for _, c := range m.ToolCalls {
				text += " " + c.Name + " " + c.Arguments
			}
			msgs[i] = tokenize.Message{Role: m.Role, Text: text}
		}
		return &Prompt{tokens: tokenize.Chat(msgs)}
	case openai.RouteCompletions:
		return &Prompt{tokens: tokenize.Append(nil, r.Prompt)}
	}
	return nil
}

// contentText is a message content's text: a string, or its text parts separated by spaces (the
// tokenizer splits on whitespace, so this matches the agent's joining).
func contentText(m openai.Message) string {
	raw := bytes.TrimLeft(m.Content, " \t\r\n")
	if len(raw) == 0 {
		return ""
	}
	if raw[0] == '"' {
		return m.Text() // decoded once per request, shared with the prefix index
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	out := ""
	for _, p := range parts {
		if p.Type == "text" {
			out += p.Text + " "
		}
	}
	return out
}
