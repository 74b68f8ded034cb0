package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// chatUsage is the usage object of the demo agent's last chunk: OpenAI's fields plus
// context_tokens (the whole prompt, the turns read from the sidecar's session included).
type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	ContextTokens       int `json:"context_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

// cached is the prompt tokens the serving pod found in its prefix KV cache.
func (u *chatUsage) cached() int {
	if u == nil || u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// streamReply is what one streamed chat completion delivered.
type streamReply struct {
	// Content is the concatenated delta content of every choice.
	Content string
	// Chunks counts the events that carried content.
	Chunks int
	// First is when the first content event arrived (the reader's clock); zero without one.
	First time.Time
	// Usage is the usage event's object, nil when the stream had none.
	Usage *chatUsage
}

// errNoDone is returned when a stream ends without its [DONE] event.
var errNoDone = errors.New("the stream ended without [DONE]")

// maxEvent bounds one SSE line (the demo's chunks are a few hundred bytes).
const maxEvent = 1 << 20

// readSSE reads an OpenAI chat-completion event stream from r until [DONE]. An event is the
// data: lines before a blank line, joined by newlines (other fields and comments are ignored).
// An error event ({"error": {...}}), an event that is not JSON, or an end without [DONE] is an
// error; what was read so far is returned with it. now stamps the first content event.
func readSSE(r io.Reader, now func() time.Time) (streamReply, error) {
	var out streamReply
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxEvent)
	var data [][]byte
	for {
		more := sc.Scan()
		line := sc.Bytes()
		if more && len(line) > 0 {
			if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				data = append(data, bytes.TrimPrefix(v, []byte(" ")))
			}
			continue
		}
		if len(data) > 0 {
			ev := bytes.Join(data, []byte("\n"))
			data = data[:0]
			if bytes.Equal(ev, []byte("[DONE]")) {
				return out, nil
			}
			if err := out.add(ev, now); err != nil {
				return out, err
			}
		}
		if !more {
			if err := sc.Err(); err != nil {
				return out, fmt.Errorf("reading the stream: %w", err)
			}
			return out, errNoDone
		}
	}
}

// add folds one event into the reply.
func (s *streamReply) add(ev []byte, now func() time.Time) error {
	var c struct {
		Choices []struct {
			Delta struct {
				Content string `json:"content"`
			} `json:"delta"`
		} `json:"choices"`
		Usage *chatUsage `json:"usage"`
		Error *struct {
			Message string `json:"message"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(ev, &c); err != nil {
		return fmt.Errorf("event %.80q is not a JSON chunk: %w", ev, err)
	}
	if c.Error != nil {
		return fmt.Errorf("error event: %s (code %v)", c.Error.Message, c.Error.Code)
	}
	text := ""
	for _, ch := range c.Choices {
		text += ch.Delta.Content
	}
	if text != "" {
		if s.First.IsZero() {
			s.First = now()
		}
		s.Content += text
		s.Chunks++
	}
	if c.Usage != nil {
		s.Usage = c.Usage
	}
	return nil
}
