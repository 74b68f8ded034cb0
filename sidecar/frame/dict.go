package frame

// jsonDict is a raw-content zstd dictionary of the JSON that agents typically
// store: session envelopes and chat turns. Raw-content dictionaries only
// prime the match window, so the content is phrased as the substrings a
// compressor would reuse. Changing it breaks old dictionary frames: keep it
// append-only and bump dictID if it must change.
var jsonDict = []byte(`{"conversation_id":"","version":0,"updated_at":"2026-01-01T00:00:00Z","metadata":{},` +
	`"turns":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"` +
	`"},{"role":"assistant","content":"","tool_calls":[{"id":"call_","type":"function","function":{"name":"","arguments":"{\"` +
	`"}}]},{"role":"tool","tool_call_id":"call_","content":"` +
	`"}],"messages":[{"role":"user","content":"` +
	`","name":"","model":"","usage":{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0},"created_at":"` +
	`the of and to in is that for it with as was on be by this are or at from an which have not but ` +
	`"summary":"","context":{"documents":[{"id":"","text":"","score":0.0}]}}`)
