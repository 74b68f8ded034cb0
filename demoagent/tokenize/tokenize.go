// Package tokenize is the demo agent's tokenizer and chat template, shared with the benchmarks
// that must see prompts exactly as the agent does.
//
// A token is a whitespace-separated word; its id is the 64-bit FNV-1a hash of the word. A chat
// prompt is each message's role marker token ("<|user|>") followed by its words, and ends with
// the assistant marker (the generation prompt), so the prompt of a conversation's next turn starts
// with the previous prompt followed by the previous answer, as with a real chat template.
package tokenize

import (
	"hash/fnv"
	"strconv"
	"strings"
)

// ID is the token id of word.
func ID(word string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(word))
	return h.Sum64()
}

// Append appends the token ids of text to ids.
func Append(ids []uint64, text string) []uint64 {
	for _, w := range strings.Fields(text) {
		ids = append(ids, ID(w))
	}
	return ids
}

// Count is the number of tokens of text.
func Count(text string) int { return len(strings.Fields(text)) }

// Message is a chat message as the template sees it.
type Message struct {
	Role, Text string
}

// Marker is the token that opens a message of role.
func Marker(role string) uint64 { return ID("<|" + role + "|>") }

// Chat renders messages with the chat template.
func Chat(msgs []Message) []uint64 {
	var ids []uint64
	for _, m := range msgs {
		ids = append(ids, Marker(m.Role))
		ids = Append(ids, m.Text)
	}
	return append(ids, Marker("assistant"))
}

// Output is the demo agent's answer of n tokens: "tok0 tok1 ... tok<n-1> ".
func Output(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(OutputToken(i))
	}
	return b.String()
}

// OutputToken is the text of the answer's token i, with its trailing space.
func OutputToken(i int) string { return "tok" + strconv.Itoa(i) + " " }

// OutputIDs are the token ids of Output(n).
func OutputIDs(n int) []uint64 {
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = ID("tok" + strconv.Itoa(i))
	}
	return ids
}
