package kvindex

import (
	"fmt"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/gateway/openai"
)

// BenchmarkRequestReaders is what the gateway reads of a long chat prompt before it picks a pod
// (the Mooncake trace's prompts are about 10,000 tokens): Parse, the identity fields the session
// scoping reads, the prompt text of the approximate prefix index and the exact index's tokens.
func BenchmarkRequestReaders(b *testing.B) {
	words := make([]string, 12000)
	for i := range words {
		words[i] = fmt.Sprintf("w%d", i)
	}
	body := []byte(`{"model":"m","stream":true,"max_tokens":8,"user":"u","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"` +
		strings.Join(words, " ") + `"}]}`)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r, err := openai.Parse(openai.RouteChat, body)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = r.Field("user"), r.Field("conversation_id")
		if len(r.PromptText()) == 0 || DemoPrompt(r).Tokens() == 0 {
			b.Fatal("empty prompt")
		}
	}
}
