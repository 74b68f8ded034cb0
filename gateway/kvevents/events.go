// Package kvevents encodes, decodes and carries the KV-cache events vLLM publishes with
// --kv-events-config (BlockStored, BlockRemoved, AllBlocksCleared): the msgpack codec, and a
// ZeroMQ PUB/SUB transport (Publisher, Subscribe) on github.com/go-zeromq/zmq4. The demo agent
// publishes with it (demoagent/kvpub); the gateway subscribes (gateway/kvindex).
//
// Wire layout (vLLM's ZmqEventPublisher): a ZeroMQ PUB multipart message of three frames,
// topic, an 8-byte big-endian sequence number, and a msgpack payload. The payload is an
// EventBatch encoded array-like: [ts float, events []event, data_parallel_rank int|nil]
// (the rank is omitted when unset). Each event is a tagged array whose first element names
// its kind:
//
//	["BlockStored", block_hashes, parent_block_hash|nil, token_ids, block_size, lora_id|nil, medium|nil]
//	["BlockRemoved", block_hashes, medium|nil]
//	["AllBlocksCleared"]
//
// Block hashes are integers in older vLLM releases and byte strings in newer ones; both decode
// to a Hash. All msgpack work is done by github.com/vmihailenco/msgpack/v5.
package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Event kind tags as vLLM writes them.
const (
	TagBlockStored      = "BlockStored"
	TagBlockRemoved     = "BlockRemoved"
	TagAllBlocksCleared = "AllBlocksCleared"
)

// Hash is one block hash in a form that compares equal however the engine wrote it: an
// integer hash is its 8 big-endian bytes, a byte-string hash is its bytes.
type Hash string

// IntHash returns the Hash of an integer block hash.
func IntHash(h uint64) Hash {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], h)
	return Hash(b[:])
}

// Event is one decoded KV-cache event. Kind is one of the Tag constants; Parent is empty when
// the stored chain starts at the root.
type Event struct {
	Kind      string
	Hashes    []Hash
	Parent    Hash
	TokenIDs  []uint32
	BlockSize int
	Medium    string
}

// Batch is one EventBatch: a timestamp (seconds since the epoch) and its events.
type Batch struct {
	TS     float64
	Events []Event
	// DPRank is the data-parallel rank, or -1 when the engine did not set one.
	DPRank int
}

// Message is one PUB message: topic, sequence number and batch.
type Message struct {
	Topic string
	Seq   uint64
	Batch Batch
}

// Frames returns the three ZeroMQ frames of m.
func (m Message) Frames() ([][]byte, error) {
	p, err := EncodeBatch(m.Batch)
	if err != nil {
		return nil, err
	}
	seq := make([]byte, 8)
	binary.BigEndian.PutUint64(seq, m.Seq)
	return [][]byte{[]byte(m.Topic), seq, p}, nil
}

// ParseFrames decodes the frames of one PUB message.
func ParseFrames(frames [][]byte) (Message, error) {
	if len(frames) != 3 {
		return Message{}, fmt.Errorf("kv event message has %d frames, want 3", len(frames))
	}
	if len(frames[1]) != 8 {
		return Message{}, fmt.Errorf("kv event sequence frame has %d bytes, want 8", len(frames[1]))
	}
	b, err := DecodeBatch(frames[2])
	if err != nil {
		return Message{}, err
	}
	return Message{Topic: string(frames[0]), Seq: binary.BigEndian.Uint64(frames[1]), Batch: b}, nil
}

// EncodeBatch returns the msgpack payload of b in vLLM's array-like layout. Hashes that are
// 8 bytes long are written as integers (vLLM's int form); others as byte strings.
func EncodeBatch(b Batch) ([]byte, error) {
	evs := make([]any, 0, len(b.Events))
	for _, e := range b.Events {
		v, err := eventArray(e)
		if err != nil {
			return nil, err
		}
		evs = append(evs, v)
	}
	arr := []any{b.TS, evs}
	if b.DPRank >= 0 {
		arr = append(arr, b.DPRank)
	}
	out, err := msgpack.Marshal(arr)
	if err != nil {
		return nil, fmt.Errorf("encode kv event batch: %w", err)
	}
	return out, nil
}

func hashValue(h Hash) any {
	if len(h) == 8 {
		return binary.BigEndian.Uint64([]byte(h))
	}
	return []byte(h)
}

func hashValues(hs []Hash) []any {
	out := make([]any, len(hs))
	for i, h := range hs {
		out[i] = hashValue(h)
	}
	return out
}

func optString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func eventArray(e Event) ([]any, error) {
	switch e.Kind {
	case TagBlockStored:
		var parent any
		if e.Parent != "" {
			parent = hashValue(e.Parent)
		}
		return []any{e.Kind, hashValues(e.Hashes), parent, e.TokenIDs, e.BlockSize, nil, optString(e.Medium)}, nil
	case TagBlockRemoved:
		return []any{e.Kind, hashValues(e.Hashes), optString(e.Medium)}, nil
	case TagAllBlocksCleared:
		return []any{e.Kind}, nil
	}
	return nil, fmt.Errorf("unknown kv event kind %q", e.Kind)
}

// ErrMalformed is wrapped by every decode error caused by the payload's shape.
var ErrMalformed = errors.New("malformed kv event")

// DecodeBatch decodes one EventBatch payload. Unknown event kinds are skipped so that a newer
// engine does not break the subscriber.
func DecodeBatch(p []byte) (Batch, error) {
	var raw []msgpack.RawMessage
	if err := msgpack.Unmarshal(p, &raw); err != nil {
		return Batch{}, fmt.Errorf("%w: batch: %w", ErrMalformed, err)
	}
	if len(raw) < 2 {
		return Batch{}, fmt.Errorf("%w: batch has %d fields", ErrMalformed, len(raw))
	}
	b := Batch{DPRank: -1}
	if err := msgpack.Unmarshal(raw[0], &b.TS); err != nil {
		return Batch{}, fmt.Errorf("%w: ts: %w", ErrMalformed, err)
	}
	if len(raw) > 2 && len(raw[2]) > 0 { // an explicit nil rank decodes to an empty RawMessage
		var r *int
		if err := msgpack.Unmarshal(raw[2], &r); err != nil {
			return Batch{}, fmt.Errorf("%w: dp rank: %w", ErrMalformed, err)
		}
		if r != nil {
			b.DPRank = *r
		}
	}
	var evs []msgpack.RawMessage
	if err := msgpack.Unmarshal(raw[1], &evs); err != nil {
		return Batch{}, fmt.Errorf("%w: events: %w", ErrMalformed, err)
	}
	for _, r := range evs {
		e, ok, err := decodeEvent(r)
		if err != nil {
			return Batch{}, err
		}
		if ok {
			b.Events = append(b.Events, e)
		}
	}
	return b, nil
}
