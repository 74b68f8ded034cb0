package openai

// BytesPerToken is the gateway's estimate of text bytes per token (OpenAI's rule of thumb for
// English). The gateway has no tokenizer: it estimates prompt tokens for quotas and queue
// metrics before the backend reports usage, and bills usage once it does.
const BytesPerToken = 4

// EstimateTokens estimates the tokens of s: one per BytesPerToken bytes, rounded up.
func EstimateTokens(s string) int {
	return (len(s) + BytesPerToken - 1) / BytesPerToken
}

// DefaultMaxTokens is the completion length assumed for quotas when a request sets no
// max_tokens; usage corrects it.
const DefaultMaxTokens = 256

// CompletionBudget is the completion tokens a request may produce, for quotas and load: its
// max_tokens, else DefaultMaxTokens; 0 for embeddings, which produce none.
func (r *Request) CompletionBudget() int {
	switch {
	case !r.Route.Generates():
		return 0
	case r.MaxTokens > 0:
		return r.MaxTokens
	}
	return DefaultMaxTokens
}
