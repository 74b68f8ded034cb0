package kvevents

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// decodeEvent decodes one tagged event array; ok is false for a kind this package does not know.
func decodeEvent(r msgpack.RawMessage) (Event, bool, error) {
	var f []msgpack.RawMessage
	if err := msgpack.Unmarshal(r, &f); err != nil || len(f) == 0 {
		return Event{}, false, fmt.Errorf("%w: event is not a tagged array: %v", ErrMalformed, err)
	}
	var e Event
	if err := msgpack.Unmarshal(f[0], &e.Kind); err != nil {
		return Event{}, false, fmt.Errorf("%w: event tag: %w", ErrMalformed, err)
	}
	switch e.Kind {
	case TagBlockStored:
		if len(f) < 5 {
			return Event{}, false, fmt.Errorf("%w: BlockStored has %d fields", ErrMalformed, len(f))
		}
		var err error
		if e.Hashes, err = decodeHashes(f[1]); err != nil {
			return Event{}, false, err
		}
		if e.Parent, err = decodeHash(f[2]); err != nil {
			return Event{}, false, err
		}
		if e.TokenIDs, err = decodeTokenIDs(f[3]); err != nil {
			return Event{}, false, err
		}
		if err := msgpack.Unmarshal(f[4], &e.BlockSize); err != nil {
			return Event{}, false, fmt.Errorf("%w: block size: %w", ErrMalformed, err)
		}
		if len(f) > 6 {
			e.Medium = decodeOptString(f[6])
		}
	case TagBlockRemoved:
		if len(f) < 2 {
			return Event{}, false, fmt.Errorf("%w: BlockRemoved has %d fields", ErrMalformed, len(f))
		}
		var err error
		if e.Hashes, err = decodeHashes(f[1]); err != nil {
			return Event{}, false, err
		}
		if len(f) > 2 {
			e.Medium = decodeOptString(f[2])
		}
	case TagAllBlocksCleared:
	default:
		return Event{}, false, nil
	}
	return e, true, nil
}

func decodeOptString(r msgpack.RawMessage) string {
	if len(r) == 0 {
		return ""
	}
	var s *string
	if msgpack.Unmarshal(r, &s) != nil || s == nil {
		return ""
	}
	return *s
}

// decodeHashes decodes an array of block hashes in one pass over it (a BlockStored event of a
// long prompt carries hundreds).
func decodeHashes(r msgpack.RawMessage) ([]Hash, error) {
	d := msgpack.NewDecoder(bytes.NewReader(r))
	n, err := d.DecodeArrayLen()
	if err != nil {
		return nil, fmt.Errorf("%w: block hashes: %w", ErrMalformed, err)
	}
	out := make([]Hash, 0, max(n, 0))
	for range n {
		h, err := nextHash(d)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// nextHash decodes the decoder's next value as a block hash: an unsigned or signed integer, a
// byte string, a string, or nil (empty Hash).
func nextHash(d *msgpack.Decoder) (Hash, error) {
	c, err := d.PeekCode()
	if err != nil {
		return "", fmt.Errorf("%w: block hash: %w", ErrMalformed, err)
	}
	switch {
	case c == msgpcode.Nil:
		return "", d.DecodeNil()
	case msgpcode.IsFixedNum(c), c == msgpcode.Uint8, c == msgpcode.Uint16, c == msgpcode.Uint32, c == msgpcode.Uint64:
		u, err := d.DecodeUint64()
		if err != nil {
			return "", fmt.Errorf("%w: block hash: %w", ErrMalformed, err)
		}
		return IntHash(u), nil
	case c == msgpcode.Int8, c == msgpcode.Int16, c == msgpcode.Int32, c == msgpcode.Int64:
		i, err := d.DecodeInt64()
		if err != nil {
			return "", fmt.Errorf("%w: block hash: %w", ErrMalformed, err)
		}
		return IntHash(uint64(i)), nil
	case msgpcode.IsBin(c), msgpcode.IsString(c):
		b, err := d.DecodeBytes()
		if err != nil {
			return "", fmt.Errorf("%w: block hash: %w", ErrMalformed, err)
		}
		return Hash(b), nil
	}
	return "", fmt.Errorf("%w: block hash of msgpack code %#x", ErrMalformed, c)
}

// decodeTokenIDs decodes an array of token ids in one pass over it.
func decodeTokenIDs(r msgpack.RawMessage) ([]uint32, error) {
	if len(r) == 0 {
		return nil, nil
	}
	d := msgpack.NewDecoder(bytes.NewReader(r))
	n, err := d.DecodeArrayLen()
	if err != nil {
		return nil, fmt.Errorf("%w: token ids: %w", ErrMalformed, err)
	}
	if n < 0 {
		return nil, nil
	}
	out := make([]uint32, n)
	for i := range out {
		if out[i], err = d.DecodeUint32(); err != nil {
			return nil, fmt.Errorf("%w: token ids: %w", ErrMalformed, err)
		}
	}
	return out, nil
}

// decodeHash accepts an unsigned or signed integer, a byte string, or nil (empty Hash).
func decodeHash(r msgpack.RawMessage) (Hash, error) {
	if len(r) == 0 { // msgpack decodes nil into an empty RawMessage
		return "", nil
	}
	var v any
	if err := msgpack.Unmarshal(r, &v); err != nil {
		return "", fmt.Errorf("%w: block hash: %w", ErrMalformed, err)
	}
	switch t := v.(type) {
	case nil:
		return "", nil
	case []byte:
		return Hash(t), nil
	case string:
		return Hash(t), nil
	case uint64:
		return IntHash(t), nil
	case int64:
		return IntHash(uint64(t)), nil
	case uint8, uint16, uint32, int8, int16, int32:
		var u uint64
		if err := msgpack.Unmarshal(r, &u); err != nil {
			var i int64
			if err := msgpack.Unmarshal(r, &i); err != nil {
				return "", fmt.Errorf("%w: block hash: %w", ErrMalformed, err)
			}
			u = uint64(i)
		}
		return IntHash(u), nil
	}
	return "", fmt.Errorf("%w: block hash of type %T", ErrMalformed, v)
}
