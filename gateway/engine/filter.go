package engine

import (
	"context"
	"sort"

	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// A response's texts pass the StreamFilters as streams keyed by choice and piece: each choice's
// content, reasoning and every tool call's arguments is its own stream, so a value split across
// chunks is found whole in each (openai.Piece.Part numbers the pieces of a choice).
const keyStride = 1 << 16

func streamKey(choice, part int) int { return choice*keyStride + part }

// filterChain is the StreamFilters of one response.
type filterChain struct {
	fs     []stage.StreamFilter
	closed map[int]bool         // choices ended
	seen   map[int]map[int]bool // choice -> parts written
	// closedNow are the choices the last filterChunk ended.
	closedNow []int
}

func (r *request) newFilters(ctx context.Context) *filterChain {
	fc := &filterChain{closed: map[int]bool{}, seen: map[int]map[int]bool{}}
	for _, f := range r.e.Ext.Filters {
		if s := f.NewStream(ctx, r.sreq); s != nil {
			fc.fs = append(fc.fs, s)
		}
	}
	return fc
}

// apply passes text of one piece of choice through every filter; closing also ends its text.
func (fc *filterChain) apply(choice, part int, text string, closing bool) (string, error) {
	if fc.seen[choice] == nil {
		fc.seen[choice] = map[int]bool{}
	}
	fc.seen[choice][part] = true
	key := streamKey(choice, part)
	var err error
	for _, f := range fc.fs {
		if text, err = f.Write(key, text); err != nil {
			return "", err
		}
		if closing {
			rest, err := f.Close(key)
			if err != nil {
				return "", err
			}
			text += rest
		}
	}
	return text, nil
}

// closeChoice ends every piece of choice not in have and returns their rest.
func (fc *filterChain) closeChoice(choice int, have map[int]bool) ([]openai.Piece, error) {
	var parts []int
	for p := range fc.seen[choice] {
		if !have[p] {
			parts = append(parts, p)
		}
	}
	sort.Ints(parts)
	var out []openai.Piece
	for _, part := range parts {
		rest, err := fc.apply(choice, part, "", true)
		if err != nil {
			return nil, err
		}
		if rest != "" {
			p := openai.PieceOfPart(part)
			p.Text = rest
			out = append(out, p)
		}
	}
	fc.closed[choice] = true
	fc.closedNow = append(fc.closedNow, choice)
	return out, nil
}

func (fc *filterChain) blocked() (string, bool) {
	for _, f := range fc.fs {
		if why, ok := f.Blocked(); ok {
			return why, true
		}
	}
	return "", false
}

// open lists the choices seen and not closed, in order.
func (fc *filterChain) open() []int {
	var out []int
	for c := range fc.seen {
		if !fc.closed[c] {
			out = append(out, c)
		}
	}
	sort.Ints(out)
	return out
}

// stopped lists the choices a block stopped: those still open and those the last chunk ended
// (its finish_reason never reached the client).
func (fc *filterChain) stopped() []int {
	out := fc.open()
	out = append(out, fc.closedNow...)
	sort.Ints(out)
	return out
}

// filterChunk runs every piece of c's choices through the filters (whole: c is a whole response,
// every choice ends) and returns the edits to make to the chunk's JSON. A choice whose texts a
// filter changed or held back loses its logprobs, whose tokens would repeat the text; one whose
// texts all passed unchanged keeps them.
func (fc *filterChain) filterChunk(c *openai.Chunk, whole bool) ([]openai.ChoiceEdit, error) {
	fc.closedNow = fc.closedNow[:0]
	if len(fc.fs) == 0 {
		return nil, nil
	}
	var edits []openai.ChoiceEdit
	for pos := range c.Choices {
		ch := &c.Choices[pos]
		closing := whole || ch.FinishReason != nil
		e := openai.ChoiceEdit{Choice: pos}
		have := map[int]bool{}
		for _, p := range ch.Pieces() {
			part := p.Part()
			have[part] = true
			out, err := fc.apply(ch.Index, part, p.Text, closing)
			if err != nil {
				return nil, err
			}
			if out != p.Text {
				p.Text = out
				e.Pieces = append(e.Pieces, p)
			}
		}
		if closing {
			rest, err := fc.closeChoice(ch.Index, have)
			if err != nil {
				return nil, err
			}
			e.Pieces = append(e.Pieces, rest...)
		}
		if len(e.Pieces) > 0 {
			e.DropLogprobs = true
			openai.SortPieces(e.Pieces)
			edits = append(edits, e)
		}
	}
	return edits, nil
}

// streamFiltered ends a stream a filter blocked the way OpenAI ends one its content filter
// stopped: a last chunk with finish_reason "content_filter" for every choice the block stopped,
// the usage chunk when the client asked for usage, then [DONE]. A policy decision is not a
// failure: the status is 200 and the stream is not counted as broken. With
// Config.BlockedAsError the stream ends with an error event instead.
func (r *request) streamFiltered(fc *filterChain, why, id, model string, usageSent bool) error {
	r.out.Blocked = why
	if r.e.Cfg.BlockedAsError {
		return r.streamBroke(blockedError(why))
	}
	stopped := fc.stopped()
	if len(stopped) == 0 {
		stopped = []int{0}
	}
	for _, choice := range stopped {
		if err := r.send(openai.ContentFilterChunk(r.body.Route, id, model, r.start.Unix(), choice)); err != nil {
			return err
		}
	}
	r.account()
	if r.body.IncludeUsage && !usageSent {
		u := &openai.Usage{PromptTokens: r.out.PromptTokens, CompletionTokens: r.out.CompletionTokens,
			TotalTokens: r.out.PromptTokens + r.out.CompletionTokens}
		if err := r.send(r.synthChunk(id, model, -1, nil, u)); err != nil {
			return err
		}
	}
	if err := r.sink.Finish(); err != nil {
		return clientGone(err)
	}
	return nil
}

// answerFiltered answers a request a RequestStage blocked with a completion that finishes with
// "content_filter" and carries no text (streamed: one such chunk, then [DONE]); nothing was
// sent to a pod, so no tokens are billed. Embeddings have no finish reason: their blocks stay
// errors (filteredAnswer reports false).
func (r *request) answerFiltered() *openai.Error {
	id := "chatcmpl-" + r.meta.RequestID
	if r.body.Route != openai.RouteChat {
		id = "cmpl-" + r.meta.RequestID
	}
	created := r.start.Unix()
	r.out.Status = 200
	if !r.body.Stream {
		if err := r.sink.Response(r.meta, openai.ContentFilterResponse(r.body.Route, id, r.body.Model, created, nil, nil)); err != nil {
			return openai.NewError(499, "cancelled", "client_closed", "", "client closed the request")
		}
		return nil
	}
	send := func(b []byte) error {
		if !r.started {
			r.started = true
			if err := r.sink.Start(r.meta); err != nil {
				return err
			}
		}
		return r.sink.Event(b)
	}
	err := send(openai.ContentFilterChunk(r.body.Route, id, r.body.Model, created, 0))
	if err == nil && r.body.IncludeUsage {
		err = send(r.synthChunk(id, r.body.Model, -1, nil, &openai.Usage{}))
	}
	if err == nil {
		err = r.sink.Finish()
	}
	if err != nil {
		return openai.NewError(499, "cancelled", "client_closed", "", "client closed the request")
	}
	return nil
}

// filteredAnswer reports whether a request block of status st is answered with
// answerFiltered: a policy detection (400) on a completion route, unless Config.BlockedAsError.
func (r *request) filteredAnswer(st int) bool {
	return !r.e.Cfg.BlockedAsError && st == 400 && r.body.Route.Generates()
}
