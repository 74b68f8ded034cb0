package frame

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/sidecar/keys"
)

// TestFramesOfEarlierReleasesOpen opens frames sealed by an earlier release
// (testdata/frames-v1.json: every codec, with and without the dictionary,
// key "k2024" of 32 bytes 0x5a, tenant team-a, binding sess/conv-1), whatever
// this build seals by default: the format on disk is versioned, and readers
// keep opening every codec it names.
func TestFramesOfEarlierReleasesOpen(t *testing.T) {
	b, err := os.ReadFile("testdata/frames-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var frames map[string]string
	if err := json.Unmarshal(b, &frames); err != nil {
		t.Fatal(err)
	}
	if len(frames) != 5 {
		t.Fatalf("%d golden frames, want 5", len(frames))
	}
	r, err := keys.NewRing("k2024", map[string][]byte{"k2024": bytes.Repeat([]byte{0x5a}, keys.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range []Compression{"", CompressS2, CompressZstd, CompressNone} {
		c, err := New(r, Options{Tenant: "team-a", Compression: comp})
		if err != nil {
			t.Fatal(err)
		}
		for name, h := range frames {
			f, err := hex.DecodeString(h)
			if err != nil {
				t.Fatal(err)
			}
			p, err := c.Open(Binding{Kind: "sess", ID: "conv-1"}, f)
			if err != nil || !json.Valid(p) || !strings.HasPrefix(string(p), `{"turns":[`) {
				t.Errorf("codec %q opening the %s frame: %q, %v", comp, name, p, err)
			}
		}
	}
}
