package checkpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
)

// claims returns a state with n completed claims.
func claims(n int) Data {
	d := Data{Claims: map[string]Claim{}}
	for i := 0; i < n; i++ {
		uid := fmt.Sprintf("uid-%d", i)
		d.Claims[uid] = Claim{UID: uid, Namespace: "ns", Name: uid, State: PrepareCompleted, Devices: []Device{
			{Requests: []string{"gpu"}, Pool: "node", Name: fmt.Sprintf("gpu-%d", i), GPUUUID: "GPU-" + uid, CDIDeviceIDs: []string{"k8s.gpu.neuronetes.io/claim=" + uid}},
		}}
	}
	return d
}

func inode(t *testing.T, path string) (uint64, int64) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino, st.Size()
}

// slotOf returns the bytes of slot i of the file.
func slotOf(t *testing.T, path string, i int) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return raw[i*len(raw)/regions : (i+1)*len(raw)/regions]
}

func TestSlotsSaveInPlace(t *testing.T) {
	s := &Store{Path: filepath.Join(t.TempDir(), "checkpoint.json"), BootID: "b", InPlace: true}
	if err := s.Save(claims(1)); err != nil {
		t.Fatal(err)
	}
	ino, size := inode(t, s.Path)
	if size != regions*minSlotSize {
		t.Errorf("file size %d, want %d", size, regions*minSlotSize)
	}
	for n := 2; n <= 5; n++ {
		if err := s.Save(claims(n)); err != nil {
			t.Fatal(err)
		}
		if i, sz := inode(t, s.Path); i != ino || sz != size {
			t.Errorf("save %d replaced or resized the file: inode %d->%d size %d->%d", n, ino, i, size, sz)
		}
		// Saves alternate: save n (generation n) lands in slot (n-1)%2.
		gen, _, err := parseRegion(slotMagic, slotOf(t, s.Path, (n-1)%2))
		if err != nil || gen != uint64(n) {
			t.Errorf("save %d: slot %d has generation %d (%v), want %d", n, (n-1)%2, gen, err, n)
		}
		// A second store (another process) reads what the first one wrote.
		got, boot, err := (&Store{Path: s.Path}).Load()
		if err != nil || boot != "b" || !reflect.DeepEqual(got, claims(n)) {
			t.Errorf("load after save %d: %d claims, boot %q, %v", n, len(got.Claims), boot, err)
		}
	}
}

func TestSlotsRecoverFromTornWrites(t *testing.T) {
	tests := []struct {
		name string
		// damage changes the file after generation 1 (slot 0) and 2 (slot 1) were saved.
		damage func(t *testing.T, path string, slotSize int64)
		want   Data
		// wantErr is the error a fresh Load must return (nil: want is loaded).
		wantErr error
	}{
		{"intact", func(*testing.T, string, int64) {}, claims(2), nil},
		{"newest payload torn", func(t *testing.T, path string, size int64) {
			overwrite(t, path, size+headerSize+10, []byte("XXXX"))
		}, claims(1), nil},
		{"newest header torn", func(t *testing.T, path string, size int64) {
			overwrite(t, path, size, []byte("garbage"))
		}, claims(1), nil},
		{"newest write cut short", func(t *testing.T, path string, size int64) {
			// A write of generation 3 into slot 0 that stopped after the header and a few bytes.
			payload, _ := Encode(CurrentVersion, "b", claims(3))
			overwrite(t, path, 0, append(regionHeader(slotMagic, 3, payload), payload[:20]...))
		}, claims(2), nil},
		{"older slot torn", func(t *testing.T, path string, size int64) {
			overwrite(t, path, headerSize+5, []byte("XXXX"))
		}, claims(2), nil},
		{"both torn", func(t *testing.T, path string, size int64) {
			overwrite(t, path, headerSize+5, []byte("XXXX"))
			overwrite(t, path, size+headerSize+5, []byte("XXXX"))
		}, Data{}, ErrCorrupt},
		{"valid crc, bad envelope checksum", func(t *testing.T, path string, size int64) {
			// A slot whose framing is intact but whose envelope does not verify is not trusted.
			good, _ := Encode(CurrentVersion, "b", claims(3))
			var env envelope
			_ = json.Unmarshal(good, &env)
			env.Checksum = "00"
			bad, _ := json.Marshal(env)
			overwrite(t, path, size, append(regionHeader(slotMagic, 3, bad), bad...))
		}, claims(1), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Store{Path: filepath.Join(t.TempDir(), "checkpoint.json"), BootID: "b", InPlace: true}
			for n := 1; n <= 2; n++ {
				if err := s.Save(claims(n)); err != nil {
					t.Fatal(err)
				}
			}
			tt.damage(t, s.Path, minSlotSize)
			fresh := &Store{Path: s.Path, BootID: "b", InPlace: true}
			got, _, err := fresh.Load()
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("load = %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("load = %d claims, %v; want %d claims", len(got.Claims), err, len(tt.want.Claims))
			}
			// The next save never overwrites the state just loaded.
			if err := fresh.Save(claims(4)); err != nil {
				t.Fatal(err)
			}
			if got, _, err := (&Store{Path: s.Path}).Load(); err != nil || !reflect.DeepEqual(got, claims(4)) {
				t.Errorf("load after repair save: %d claims, %v", len(got.Claims), err)
			}
		})
	}
}

func overwrite(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestSlotsEnlargeAndShare(t *testing.T) {
	dir := t.TempDir()
	a := &Store{Path: filepath.Join(dir, "checkpoint.json"), BootID: "b", InPlace: true}
	b := &Store{Path: a.Path, BootID: "b", InPlace: true}
	if err := a.Save(claims(1)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Load(); err != nil {
		t.Fatal(err)
	}
	// b enlarges the file (a new file, renamed into place); a's next load and save must follow.
	big := claims(200)
	if err := b.Save(big); err != nil {
		t.Fatal(err)
	}
	if _, size := inode(t, a.Path); size <= regions*minSlotSize {
		t.Fatalf("file not enlarged: %d bytes", size)
	}
	if got, _, err := a.Load(); err != nil || !reflect.DeepEqual(got, big) {
		t.Fatalf("a after b enlarged: %d claims, %v", len(got.Claims), err)
	}
	// Saves alternate between the stores, each after loading what the other wrote.
	for n := 2; n < 8; n++ {
		w, r := a, b
		if n%2 == 1 {
			w, r = b, a
		}
		if _, _, err := w.Load(); err != nil {
			t.Fatal(err)
		}
		if err := w.Save(claims(n)); err != nil {
			t.Fatal(err)
		}
		if got, _, err := r.Load(); err != nil || !reflect.DeepEqual(got, claims(n)) {
			t.Fatalf("round %d: %d claims, %v", n, len(got.Claims), err)
		}
	}
	// A save on a stale view (the other store shrank nothing, but replaced the file) still lands.
	if err := b.Save(claims(300)); err != nil {
		t.Fatal(err)
	}
	if err := a.Save(claims(9)); err != nil {
		t.Fatal(err)
	}
	if got, _, err := (&Store{Path: a.Path}).Load(); err != nil || !reflect.DeepEqual(got, claims(9)) {
		t.Fatalf("after stale save: %d claims, %v", len(got.Claims), err)
	}
}

func TestSlotsReadEarlierLayout(t *testing.T) {
	s := &Store{Path: filepath.Join(t.TempDir(), "checkpoint.json"), BootID: "b", InPlace: true}
	// Earlier versions wrote one indented envelope.
	compact, err := Encode("v1", "b", sample())
	if err != nil {
		t.Fatal(err)
	}
	var env envelope
	if err := json.Unmarshal(compact, &env); err != nil {
		t.Fatal(err)
	}
	indented, _ := json.MarshalIndent(env, "", " ")
	if err := os.WriteFile(s.Path, indented, 0o600); err != nil {
		t.Fatal(err)
	}
	got, boot, err := s.Load()
	if err != nil || boot != "b" || !reflect.DeepEqual(got, sample()) {
		t.Fatalf("load of earlier layout: %+v %q %v", got, boot, err)
	}
	if err := s.Save(claims(2)); err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(s.Path); !isSlotFile(raw) {
		t.Errorf("save did not convert to the slot layout: %.40q", raw)
	}
	if got, _, err := (&Store{Path: s.Path}).Load(); err != nil || !reflect.DeepEqual(got, claims(2)) {
		t.Errorf("load after conversion: %d claims, %v", len(got.Claims), err)
	}
}

func TestLoadResultIsCallersCopy(t *testing.T) {
	s := &Store{Path: filepath.Join(t.TempDir(), "checkpoint.json"), BootID: "b", InPlace: true}
	if err := s.Save(claims(2)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the first load reads the file, the second uses the cached state
		got, _, err := s.Load()
		if err != nil {
			t.Fatal(err)
		}
		got.Claims["uid-0"].Devices[0].CDIDeviceIDs[0] = "changed"
		delete(got.Claims, "uid-1")
	}
	if got, _, err := s.Load(); err != nil || !reflect.DeepEqual(got, claims(2)) {
		t.Errorf("load after the caller changed earlier results: %+v %v", got, err)
	}
}

func TestSlotsRewriteAfterFailedWrite(t *testing.T) {
	s := &Store{Path: filepath.Join(t.TempDir(), "checkpoint.json"), BootID: "b", InPlace: true}
	if err := s.Save(claims(1)); err != nil {
		t.Fatal(err)
	}
	before, _ := inode(t, s.Path)
	regionWriter = func(string, int64, int, []byte, []byte, bool) error { return errors.New("EIO") }
	err := s.Save(claims(2))
	regionWriter = writeRegion
	if err == nil {
		t.Fatal("save with a failing write succeeded")
	}
	// A load re-reads the file from the page cache, but the next save still rewrites the whole
	// file (a new inode) instead of trusting it...
	if got, _, err := s.Load(); err != nil || !reflect.DeepEqual(got, claims(1)) {
		t.Fatalf("load after the failed save: %d claims, %v", len(got.Claims), err)
	}
	if err := s.Save(claims(3)); err != nil {
		t.Fatal(err)
	}
	after, _ := inode(t, s.Path)
	if after == before {
		t.Errorf("save after a failed write went in place")
	}
	// ...and the one after that is in place again.
	if err := s.Save(claims(4)); err != nil {
		t.Fatal(err)
	}
	if again, _ := inode(t, s.Path); again != after {
		t.Errorf("in-place saves did not resume after the rewrite")
	}
	if got, _, err := (&Store{Path: s.Path}).Load(); err != nil || !reflect.DeepEqual(got, claims(4)) {
		t.Errorf("load: %d claims, %v", len(got.Claims), err)
	}
}
