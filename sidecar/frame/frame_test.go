package frame

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/sidecar/keys"
)

func testRing(t testing.TB, active string, ids ...string) *keys.Ring {
	t.Helper()
	raw := map[string][]byte{}
	for i, id := range ids {
		raw[id] = bytes.Repeat([]byte{byte(i + 1)}, keys.KeySize)
	}
	r, err := keys.NewRing(active, raw)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func testCodec(t testing.TB, tenant string, dict bool, r *keys.Ring) *Codec {
	t.Helper()
	c, err := New(r, Options{Tenant: tenant, UseDict: dict, MaxPlaintext: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRoundTrip(t *testing.T) {
	big := []byte(`{"turns":[` + strings.Repeat(`{"role":"user","content":"hello there"},`, 400) + `{}]}`)
	ring := testRing(t, "k1", "k1")
	codecs := map[string]*Codec{}
	for _, comp := range []Compression{CompressS2, CompressZstd, CompressNone} {
		for _, dict := range []bool{false, true} {
			c, err := New(ring, Options{Tenant: "ns-a", Compression: comp, UseDict: dict})
			if err != nil {
				t.Fatal(err)
			}
			codecs[fmt.Sprintf("%s-dict=%v", comp, dict)] = c
		}
	}
	for _, in := range []struct {
		name string
		in   []byte
	}{
		{"empty", []byte{}},
		{"tiny-uncompressed", []byte(`{}`)},
		{"json", big},
		{"binary", bytes.Repeat([]byte{0, 1, 2, 255}, 1000)},
	} {
		for name, c := range codecs {
			t.Run(in.name+"/"+name, func(t *testing.T) {
				b := Binding{Kind: "sess", ID: "conv-1"}
				f, err := c.Seal(b, in.in)
				if err != nil {
					t.Fatal(err)
				}
				// Every codec opens every other codec's frames.
				for other, r := range codecs {
					got, err := r.Open(b, f)
					if err != nil {
						t.Fatalf("opened by %s: %v", other, err)
					}
					if !bytes.Equal(got, in.in) {
						t.Fatalf("opened by %s: round trip mismatch: %d vs %d bytes", other, len(got), len(in.in))
					}
				}
				compressed := c.opts.Compression != CompressNone
				if len(in.in) > 1000 && compressed && len(f) >= len(in.in)/4 {
					t.Errorf("frame %d bytes for %d bytes of repetitive JSON: not compressed", len(f), len(in.in))
				}
				if len(in.in) > 1000 && !compressed && len(f) < len(in.in) {
					t.Errorf("frame %d bytes for %d bytes with compression off", len(f), len(in.in))
				}
				if id, err := KeyID(f); err != nil || id != "k1" {
					t.Errorf("KeyID = %q, %v", id, err)
				}
			})
		}
	}
}

func TestParseCompression(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Compression
		ok   bool
	}{{"", CompressS2, true}, {"s2", CompressS2, true}, {"zstd", CompressZstd, true}, {"none", CompressNone, true}, {"gzip", "", false}} {
		got, err := ParseCompression(tc.in)
		if got != tc.want || (err == nil) != tc.ok {
			t.Errorf("ParseCompression(%q) = %q, %v", tc.in, got, err)
		}
	}
	if _, err := New(testRing(t, "k", "k"), Options{Compression: "lz4"}); err == nil {
		t.Error("New accepted compression lz4")
	}
}

func TestEveryBitFlipIsDetected(t *testing.T) {
	c := testCodec(t, "ns-a", true, testRing(t, "k1", "k1"))
	b := Binding{Kind: "sess", ID: "c"}
	f, err := c.Seal(b, []byte(`{"turns":[{"role":"user","content":"secret words secret words secret words"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for i := range len(f) * 8 {
		g := append([]byte(nil), f...)
		g[i/8] ^= 1 << (i % 8)
		if out, err := c.Open(b, g); err == nil {
			t.Fatalf("bit %d flipped: opened to %q", i, out)
		}
	}
}

func TestBindingAndKeys(t *testing.T) {
	ring := testRing(t, "k1", "k1")
	a := testCodec(t, "ns-a", false, ring)
	f, err := a.Seal(Binding{Kind: "sess", ID: "c1", Version: 7}, []byte(`{"x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	otherKey := testCodec(t, "ns-a", false, testRing(t, "k1", "zz", "k1")) // k1 has different bytes here
	for _, tc := range []struct {
		name  string
		codec *Codec
		b     Binding
		want  error
	}{
		{"same binding", a, Binding{"sess", "c1", 7}, nil},
		{"other tenant same secret", testCodec(t, "ns-b", false, ring), Binding{"sess", "c1", 7}, ErrAuth},
		{"other id", a, Binding{"sess", "c2", 7}, ErrAuth},
		{"other kind", a, Binding{"emb", "c1", 7}, ErrAuth},
		{"older frame under a newer version", a, Binding{"sess", "c1", 8}, ErrAuth},
		{"no version", a, Binding{"sess", "c1", 0}, ErrAuth},
		{"other key bytes", otherKey, Binding{"sess", "c1", 7}, ErrAuth},
		{"unknown key id", testCodec(t, "ns-a", false, testRing(t, "k2", "k2")), Binding{"sess", "c1", 7}, keys.ErrUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := tc.codec.Open(tc.b, f)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Open = %q, %v; want %v", out, err, tc.want)
			}
			if tc.want != nil && out != nil {
				t.Fatalf("failed Open returned data %q", out)
			}
		})
	}
}

func TestRotation(t *testing.T) {
	c := testCodec(t, "ns", false, testRing(t, "old", "old"))
	b := Binding{Kind: "sess", ID: "c"}
	oldF, err := c.Seal(b, []byte("v1"))
	if err != nil {
		t.Fatal(err)
	}
	c.SetRing(testRing(t, "new", "old", "new"))
	newF, err := c.Seal(b, []byte("v2"))
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := KeyID(newF); id != "new" {
		t.Fatalf("new write used key %q, want new", id)
	}
	for _, f := range [][]byte{oldF, newF} {
		if _, err := c.Open(b, f); err != nil {
			t.Fatalf("after rotation: %v", err)
		}
	}
	c.SetRing(testRing(t, "new", "new")) // old key retired
	if _, err := c.Open(b, oldF); !errors.Is(err, keys.ErrUnknownKey) {
		t.Fatalf("retired key: err = %v, want ErrUnknownKey", err)
	}
}

func TestLimitsAndMalformed(t *testing.T) {
	c := testCodec(t, "ns", false, testRing(t, "k", "k"))
	b := Binding{Kind: "sess", ID: "c"}
	if _, err := c.Seal(b, make([]byte, 2<<20)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Seal oversize: %v", err)
	}
	// A frame sealed by a codec with a bigger limit must not inflate past ours.
	for _, comp := range []Compression{CompressS2, CompressZstd} {
		bigC, err := New(c.Ring(), Options{Tenant: "ns", MaxPlaintext: 8 << 20, Compression: comp})
		if err != nil {
			t.Fatal(err)
		}
		f, err := bigC.Seal(b, make([]byte, 4<<20))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Open(b, f); !errors.Is(err, ErrTooLarge) {
			t.Errorf("Open %s bomb: %v, want ErrTooLarge", comp, err)
		}
	}
	for _, bad := range [][]byte{nil, []byte("NF"), []byte("XX\x01\x00\x01k"), append([]byte("NF\x03\x00\x01k"), make([]byte, 40)...), append([]byte("NF\x00\x00\x01k"), make([]byte, 40)...),
		append([]byte("NF\x01\x00\x01!"), make([]byte, 40)...), append([]byte("NF\x01\x05\x01k"), make([]byte, 40)...),
		append([]byte("NF\x01\x02\x01k"), make([]byte, 40)...), append([]byte("NF\x01\x08\x01k"), make([]byte, 40)...)} {
		if _, err := c.Open(b, bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("Open(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func FuzzOpen(f *testing.F) {
	c := testCodec(f, "ns", true, testRing(f, "k", "k"))
	b := Binding{Kind: "sess", ID: "c"}
	zc, err := New(c.Ring(), Options{Tenant: "ns", Compression: CompressZstd, UseDict: true})
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range []string{"", "{}", `{"turns":[{"role":"user","content":"hi hi hi hi hi hi hi hi hi hi hi hi hi hi"}]}`} {
		for _, sealer := range []*Codec{c, zc} { // S2 and zstd frames
			fr, err := sealer.Seal(b, []byte(p))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(fr)
		}
	}
	f.Add([]byte("NF\x01\x03\x01k"))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := c.Open(b, data)
		if err != nil && out != nil {
			t.Fatalf("error %v with data", err)
		}
		if err == nil {
			// Only genuine frames authenticate; re-sealing must round trip.
			fr, err := c.Seal(b, out)
			if err != nil {
				t.Fatal(err)
			}
			if back, err := c.Open(b, fr); err != nil || !bytes.Equal(back, out) {
				t.Fatalf("re-seal round trip: %v", err)
			}
		}
	})
}

func TestDictOnlyBelowDictBelow(t *testing.T) {
	small := []byte(`{"turns":[{"role":"user","content":"` + strings.Repeat("hello there ", 20) + `"}]}`)
	large := []byte(`{"turns":[` + strings.Repeat(`{"role":"user","content":"hello there"},`, DictBelow/40+10) + `{}]}`)
	b := Binding{Kind: "sess", ID: "c"}
	for _, comp := range []Compression{CompressS2, CompressZstd} {
		c, err := New(testRing(t, "k", "k"), Options{Tenant: "ns", Compression: comp, UseDict: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name     string
			in       []byte
			wantDict bool
		}{{"small", small, true}, {"large", large, false}} {
			f, err := c.Seal(b, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := f[3]&flagDict != 0; got != tc.wantDict {
				t.Errorf("%s %s (%d bytes): dictionary flag %v, want %v", comp, tc.name, len(tc.in), got, tc.wantDict)
			}
			if out, err := c.Open(b, f); err != nil || !bytes.Equal(out, tc.in) {
				t.Errorf("%s %s: round trip: %v", comp, tc.name, err)
			}
		}
	}
}
