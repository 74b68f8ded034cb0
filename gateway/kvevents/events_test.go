package kvevents

import (
	"errors"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func TestRoundTrip(t *testing.T) {
	in := Message{Topic: "kv", Seq: 42, Batch: Batch{TS: 1.5, DPRank: -1, Events: []Event{
		{Kind: TagBlockStored, Hashes: []Hash{IntHash(1), IntHash(2)}, TokenIDs: []uint32{1, 2, 3, 4},
			BlockSize: 2, Medium: "GPU"},
		{Kind: TagBlockStored, Hashes: []Hash{Hash("0123456789abcdef0123456789abcdef")},
			Parent: IntHash(2), TokenIDs: []uint32{5, 6}, BlockSize: 2},
		{Kind: TagBlockRemoved, Hashes: []Hash{IntHash(1)}},
		{Kind: TagAllBlocksCleared},
	}}}
	frames, err := in.Frames()
	if err != nil {
		t.Fatal(err)
	}
	out, err := ParseFrames(frames)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
}

// TestDecodesVLLMLayout decodes payloads built field by field as vLLM's msgspec encoder lays
// them out (array-like, tagged, trailing dp rank present or omitted, int or bytes hashes, an
// unknown future event kind).
func TestDecodesVLLMLayout(t *testing.T) {
	cases := []struct {
		name    string
		payload []any
		want    Batch
	}{
		{"int hashes no rank", []any{2.0, []any{
			[]any{"BlockStored", []any{uint64(1 << 63), int64(-5)}, nil, []any{7, 8}, 1, nil, "GPU"},
			[]any{"BlockRemoved", []any{int64(-5)}, nil},
			[]any{"AllBlocksCleared"},
		}}, Batch{TS: 2, DPRank: -1, Events: []Event{
			{Kind: TagBlockStored, Hashes: []Hash{IntHash(1 << 63), IntHash(^uint64(4))}, TokenIDs: []uint32{7, 8}, BlockSize: 1, Medium: "GPU"},
			{Kind: TagBlockRemoved, Hashes: []Hash{IntHash(^uint64(4))}},
			{Kind: TagAllBlocksCleared},
		}}},
		{"bytes hashes with rank and unknown kind", []any{3.0, []any{
			[]any{"BlockStored", []any{[]byte("abc")}, []byte("par"), []any{1}, 16, nil, nil},
			[]any{"SomethingNew", 1, 2},
		}, 1}, Batch{TS: 3, DPRank: 1, Events: []Event{
			{Kind: TagBlockStored, Hashes: []Hash{"abc"}, Parent: "par", TokenIDs: []uint32{1}, BlockSize: 16},
		}}},
	}
	cases = append(cases, struct {
		name    string
		payload []any
		want    Batch
	}{"explicit nil rank", []any{4.0, []any{}, nil}, Batch{TS: 4, DPRank: -1}})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := msgpack.Marshal(c.payload)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeBatch(p)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestRejectsMalformed(t *testing.T) {
	for name, v := range map[string]any{
		"not array":     "x",
		"short batch":   []any{1.0},
		"untagged":      []any{1.0, []any{1}},
		"short stored":  []any{1.0, []any{[]any{"BlockStored", []any{}}}},
		"bad hash type": []any{1.0, []any{[]any{"BlockRemoved", []any{1.5}}}},
	} {
		p, _ := msgpack.Marshal(v)
		if _, err := DecodeBatch(p); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: err = %v, want ErrMalformed", name, err)
		}
	}
	if _, err := ParseFrames([][]byte{{1}, {2}}); err == nil {
		t.Error("two frames accepted")
	}
}
