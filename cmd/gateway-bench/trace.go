package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// traceRow is one line of a Mooncake trace: arrival in ms, token counts, and the hashes of the
// prompt's 512-token blocks (equal hashes at a position mean equal prefixes).
type traceRow struct {
	Timestamp    int64    `json:"timestamp"`
	InputLength  int      `json:"input_length"`
	OutputLength int      `json:"output_length"`
	HashIDs      []uint64 `json:"hash_ids"`
}

// mooncakeBlock is the number of tokens a Mooncake hash id stands for.
const mooncakeBlock = 512

// replayRequest is a trace row ready to send.
type replayRequest struct {
	at     time.Duration // arrival after the start of the replay (time-compressed)
	row    traceRow
	output int // max_tokens
}

// prompt is the request's synthesized prompt, built when needed (whole windows of prompts take
// hundreds of MiB).
func (r replayRequest) prompt() string { return promptText(r.row) }

// loadTrace reads the rows that arrive in [start, start+window) (trace time).
func loadTrace(path string, start, window time.Duration) ([]traceRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	var rows []traceRow
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r traceRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("trace %s line %d: %w", path, line, err)
		}
		if err := r.check(); err != nil {
			return nil, fmt.Errorf("trace %s line %d: %w", path, line, err)
		}
		if at := time.Duration(r.Timestamp) * time.Millisecond; at < start || at >= start+window {
			continue
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("trace %s: no request arrives within %s from %s", path, window, start)
	}
	return rows, nil
}

func (r traceRow) check() error {
	switch {
	case r.InputLength < 1:
		return fmt.Errorf("input_length %d is not positive", r.InputLength)
	case r.OutputLength < 0:
		return fmt.Errorf("output_length %d is negative", r.OutputLength)
	case len(r.HashIDs) != (r.InputLength+mooncakeBlock-1)/mooncakeBlock:
		return fmt.Errorf("%d hash_ids for input_length %d (want one per %d tokens)", len(r.HashIDs), r.InputLength, mooncakeBlock)
	}
	return nil
}

// blockWord is word j of the text of Mooncake block id: distinct for every (id, j).
func blockWord(b *strings.Builder, id uint64, j int) {
	b.WriteByte('b')
	b.WriteString(strconv.FormatUint(id, 36))
	b.WriteByte('.')
	b.WriteString(strconv.FormatInt(int64(j), 36))
}

// promptText synthesizes a row's prompt: 512 words per hash id, the last block cut to make
// input_length words (one word is one token for the demo agent).
func promptText(r traceRow) string {
	var b strings.Builder
	b.Grow(r.InputLength * 9)
	left := r.InputLength
	for _, id := range r.HashIDs {
		for j := 0; j < mooncakeBlock && left > 0; j++ {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			blockWord(&b, id, j)
			left--
		}
	}
	return b.String()
}

// replay turns rows into requests: arrivals divided by speedup, outputs capped at maxOutput.
func replay(rows []traceRow, speedup float64, maxOutput int) []replayRequest {
	out := make([]replayRequest, len(rows))
	t0 := rows[0].Timestamp
	for i, r := range rows {
		out[i] = replayRequest{
			at:     time.Duration(float64(r.Timestamp-t0) * float64(time.Millisecond) / speedup),
			row:    r,
			output: max(1, min(r.OutputLength, maxOutput)),
		}
	}
	return out
}
