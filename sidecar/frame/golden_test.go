package frame

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/sidecar/keys"
)

// goldenVersion is the session version the format 2 golden frames bind.
const goldenVersion = 1767225600000000

// TestFramesOfEarlierReleasesOpen opens frames sealed by earlier releases
// (testdata/frames-v<format>.json: every codec, with and without the
// dictionary, key "k2024" of 32 bytes 0x5a, tenant team-a, binding
// sess/conv-1, format 2 at version goldenVersion), whatever this build seals
// by default: the format on disk is versioned, and readers keep opening every
// codec it names. Format 1 frames bind no version: they open only with
// AcceptUnversioned, and fail with ErrUnversioned without it.
func TestFramesOfEarlierReleasesOpen(t *testing.T) {
	r, err := keys.NewRing("k2024", map[string][]byte{"k2024": bytes.Repeat([]byte{0x5a}, keys.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		file       string
		version    int64
		acceptV1   bool
		wantErr    error
		wantFrames int
	}{
		{"frames-v1.json", 0, true, nil, 5},
		{"frames-v1.json", 0, false, ErrUnversioned, 5},
		{"frames-v2.json", goldenVersion, false, nil, 5},
		{"frames-v2.json", goldenVersion + 1, true, ErrAuth, 5},
	} {
		frames := readGolden(t, tc.file, tc.wantFrames)
		for _, comp := range []Compression{"", CompressS2, CompressZstd, CompressNone} {
			c, err := New(r, Options{Tenant: "team-a", Compression: comp, AcceptUnversioned: tc.acceptV1})
			if err != nil {
				t.Fatal(err)
			}
			for name, f := range frames {
				p, err := c.Open(Binding{Kind: "sess", ID: "conv-1", Version: tc.version}, f)
				if tc.wantErr != nil {
					if !errors.Is(err, tc.wantErr) || p != nil {
						t.Errorf("%s, codec %q, accept v1 %v, version %d, opening the %s frame: %q, %v; want %v",
							tc.file, comp, tc.acceptV1, tc.version, name, p, err, tc.wantErr)
					}
					continue
				}
				if err != nil || !json.Valid(p) || !strings.HasPrefix(string(p), `{"turns":[`) {
					t.Errorf("%s, codec %q opening the %s frame: %q, %v", tc.file, comp, name, p, err)
				}
			}
		}
	}
}

func readGolden(t *testing.T, file string, want int) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	var hexFrames map[string]string
	if err := json.Unmarshal(b, &hexFrames); err != nil {
		t.Fatal(err)
	}
	if len(hexFrames) != want {
		t.Fatalf("%s: %d golden frames, want %d", file, len(hexFrames), want)
	}
	frames := map[string][]byte{}
	for name, h := range hexFrames {
		if frames[name], err = hex.DecodeString(h); err != nil {
			t.Fatal(err)
		}
	}
	return frames
}
