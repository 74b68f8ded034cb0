package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/internal/testreq"
)

func sample() Data {
	pid := 0
	return Data{Claims: map[string]Claim{
		"uid-1": {UID: "uid-1", Namespace: "ns", Name: "a", State: PrepareCompleted, Devices: []Device{
			{Requests: []string{"gpu"}, Pool: "node", Name: "gpu-0", GPUUUID: "GPU-1", CDIDeviceIDs: []string{"k8s.gpu.neuronetes.io/claim=uid-1-gpu-0"}},
		}},
		"uid-2": {UID: "uid-2", Namespace: "ns", Name: "b", State: PrepareStarted, Devices: []Device{
			{Pool: "node", Name: "gpu-1-mig-1g-10gb-p0", GPUUUID: "GPU-2", MIGProfileID: &pid, Placement: &model.Placement{Start: 0, Size: 1}, Dynamic: true,
				MIG: &model.MIGInstance{ProfileID: 0, GIID: 3, CIID: 0, Placement: model.Placement{Start: 0, Size: 1}, UUID: "MIG-x"}},
		}},
	}}
}

// sampleOf returns sample data that uses every field of a version.
func sampleOf(version string) Data {
	d := sample()
	if version != "v1" {
		c := d.Claims["uid-1"]
		c.Devices[0].Env = []string{"NEURONETES_GPU_TIMESLICE=Short"}
		d.Claims["uid-1"] = c
	}
	if version != "v1" && version != "v2" {
		c := d.Claims["uid-1"]
		ts := 3
		c.Devices[0].TimeSlice = &ts
		c.MPS = []MPSDaemon{{ID: "uid-1-0", Devices: []string{"gpu-0"}, UUIDs: []string{"GPU-1"}}}
		d.Claims["uid-1"] = c
		d.Health = map[string]Health{"GPU-2": {Lost: time.Unix(1700000000, 0).UTC(), FatalXID: 79, FatalAt: time.Unix(1700000001, 0).UTC()}}
	}
	return d
}

func TestRoundTripEveryVersion(t *testing.T) {
	for _, v := range Versions {
		t.Run(v, func(t *testing.T) {
			for name, d := range map[string]Data{"sample": sampleOf(v), "empty": {Claims: map[string]Claim{}}} {
				raw, err := Encode(v, "boot-1", d)
				if err != nil {
					t.Fatal(err)
				}
				got, boot, err := Decode(raw)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if boot != "boot-1" || !reflect.DeepEqual(got, d) {
					t.Errorf("%s: round trip = %+v boot %q, want %+v", name, got, boot, d)
				}
			}
		})
	}
}

func mustEncode(t *testing.T, version string, d Data) []byte {
	t.Helper()
	raw, err := Encode(version, "b", d)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestDecodeCorrupt(t *testing.T) {
	if _, err := Encode("v1", "b", sampleOf("v2")); err == nil || !strings.Contains(err.Error(), "env") {
		t.Errorf("encoding v2 fields as v1: err %v, want one naming env", err)
	}
	for _, field := range []string{"health", "mps", "timeSlice"} {
		d := sampleOf("v3")
		switch field {
		case "mps":
			d.Health = nil
		case "timeSlice":
			d.Health = nil
			c := d.Claims["uid-1"]
			c.MPS = nil
			d.Claims["uid-1"] = c
		}
		if _, err := Encode("v2", "b", d); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("encoding v3 field %s as v2: err %v, want one naming it", field, err)
		}
	}
	good, _ := Encode(CurrentVersion, "b", sample())
	tests := map[string][]byte{
		"garbage":        []byte("{not json"),
		"truncated":      good[:len(good)/2],
		"flipped byte":   []byte(strings.Replace(string(good), "gpu-0", "gpu-9", 1)),
		"wrong version":  []byte(strings.Replace(string(good), `"`+CurrentVersion+`"`, `"v9"`, 1)),
		"v2 field in v1": []byte(strings.Replace(string(mustEncode(t, "v2", sampleOf("v2"))), `"v2"`, `"v1"`, 1)),
		"empty":          {},
	}
	for name, raw := range tests {
		if _, _, err := Decode(raw); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: err = %v, want ErrCorrupt", name, err)
		}
	}
}

func TestStore(t *testing.T) {
	dir := t.TempDir()
	s := &Store{Path: filepath.Join(dir, "sub", "checkpoint.json"), BootID: "boot-x"}
	d, boot, err := s.Load()
	if err != nil || len(d.Claims) != 0 || boot != "boot-x" {
		t.Fatalf("missing file: %v %v %q", d, err, boot)
	}
	if err := s.Save(sample()); err != nil {
		t.Fatal(err)
	}
	got, boot, err := s.Load()
	if err != nil || boot != "boot-x" || !reflect.DeepEqual(got, sample()) {
		t.Fatalf("load after save: %+v %q %v", got, boot, err)
	}
	entries, _ := os.ReadDir(filepath.Dir(s.Path))
	if len(entries) != 1 {
		t.Errorf("temp files left behind: %v", entries)
	}
	if err := os.WriteFile(s.Path, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Load(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("corrupt load: %v", err)
	}
	moved, err := s.Quarantine()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(moved); err != nil {
		t.Errorf("quarantined file missing: %v", err)
	}
	if d, _, err := s.Load(); err != nil || len(d.Claims) != 0 {
		t.Errorf("after quarantine: %v %v", d, err)
	}
}

func TestBootID(t *testing.T) {
	if _, err := os.Stat("/proc/sys/kernel/random/boot_id"); err != nil {
		testreq.Tool(t, "/proc/sys/kernel/random/boot_id", "%v", err)
	}
	if id := BootID(); len(id) < 32 {
		t.Errorf("boot id %q", id)
	}
}

func TestIntent(t *testing.T) {
	done := Data{Claims: map[string]Claim{"done": {UID: "done", State: PrepareCompleted}}}
	withIntent := Data{Claims: map[string]Claim{
		"done": {UID: "done", State: PrepareCompleted},
		"mid":  {UID: "mid", State: PrepareStarted},
	}}
	// loads checks what the store itself and a fresh store (another process, a restart) load.
	loads := func(t *testing.T, s *Store, want Data, what string) {
		t.Helper()
		for name, st := range map[string]*Store{"same store": s, "fresh store": {Path: s.Path, BootID: s.BootID}} {
			if got, _, err := st.Load(); err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%s, %s: load = %+v, %v; want %+v", what, name, got, err, want)
			}
		}
	}
	t.Run("intent until the next save", func(t *testing.T) {
		s := &Store{Path: filepath.Join(t.TempDir(), "checkpoint.json"), BootID: "b"}
		if err := s.Save(done); err != nil {
			t.Fatal(err)
		}
		before, _ := os.ReadFile(s.Path)
		if err := s.SaveIntent(withIntent); err != nil {
			t.Fatal(err)
		}
		after, _ := os.ReadFile(s.Path)
		size := len(after) / regions
		if !bytes.Equal(before[:2*size], after[:2*size]) {
			t.Errorf("an intent changed the durable slots")
		}
		loads(t, s, withIntent, "after intent")
		if err := s.Save(done); err != nil {
			t.Fatal(err)
		}
		loads(t, s, done, "after the save that supersedes it")
	})
	t.Run("torn intent is ignored", func(t *testing.T) {
		s := &Store{Path: filepath.Join(t.TempDir(), "checkpoint.json"), BootID: "b"}
		if err := s.Save(done); err != nil {
			t.Fatal(err)
		}
		if err := s.SaveIntent(withIntent); err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(s.Path)
		overwrite(t, s.Path, int64(intentRegion*len(raw)/regions+headerSize+3), []byte("XXXX"))
		if got, _, err := (&Store{Path: s.Path}).Load(); err != nil || !reflect.DeepEqual(got, done) {
			t.Errorf("load with torn intent: %+v %v", got, err)
		}
	})
	t.Run("no file yet: durable", func(t *testing.T) {
		s := &Store{Path: filepath.Join(t.TempDir(), "checkpoint.json"), BootID: "b"}
		if err := s.SaveIntent(withIntent); err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(s.Path)
		if gen, _, err := parseRegion(slotMagic, raw); err != nil || gen != 1 {
			t.Errorf("intent without a slot file was not saved durably: gen %d, %v", gen, err)
		}
		loads(t, s, withIntent, "after intent")
	})
	t.Run("too big for the region: durable", func(t *testing.T) {
		s := &Store{Path: filepath.Join(t.TempDir(), "checkpoint.json"), BootID: "b"}
		if err := s.Save(done); err != nil {
			t.Fatal(err)
		}
		big := claims(300)
		big.Claims["mid"] = Claim{UID: "mid", State: PrepareStarted}
		if err := s.SaveIntent(big); err != nil {
			t.Fatal(err)
		}
		loads(t, s, big, "after big intent")
	})
}

func TestCloneIsDeep(t *testing.T) {
	d := sampleOf(CurrentVersion)
	c := d.Clone()
	if !reflect.DeepEqual(c, d) {
		t.Fatalf("clone = %+v, want %+v", c, d)
	}
	dev := &c.Claims["uid-2"].Devices[0]
	dev.Requests = append(dev.Requests, "x")
	*dev.MIGProfileID = 7
	dev.Placement.Start = 5
	dev.MIG.GIID = 9
	c.Claims["uid-1"].Devices[0].CDIDeviceIDs[0] = "changed"
	c.Claims["uid-1"].Devices[0].Env[0] = "changed"
	delete(c.Claims, "uid-1")
	if !reflect.DeepEqual(d, sampleOf(CurrentVersion)) {
		t.Errorf("changing the clone changed the original: %+v", d)
	}
}

// TestSaveModes checks both save modes: by default every save replaces the file (temp file,
// fsync, rename), with InPlace saves after the first keep the file and overwrite a slot. Both
// load back the last state, and an intent written between saves is seen until the next save.
func TestSaveModes(t *testing.T) {
	inode := func(t *testing.T, path string) uint64 {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	for _, tt := range []struct {
		name        string
		inPlace     bool
		wantReplace bool
	}{{"temp file and rename (default)", false, true}, {"in place", true, false}} {
		t.Run(tt.name, func(t *testing.T) {
			s := &Store{Path: filepath.Join(t.TempDir(), "checkpoint.json"), BootID: "b", InPlace: tt.inPlace}
			d := Data{Claims: map[string]Claim{}}
			if err := s.Save(d); err != nil {
				t.Fatal(err)
			}
			for i := 1; i <= 3; i++ {
				before := inode(t, s.Path)
				uid := fmt.Sprintf("uid-%d", i)
				started := d.Clone()
				started.Claims[uid] = Claim{UID: uid, State: PrepareStarted}
				if err := s.SaveIntent(started); err != nil {
					t.Fatal(err)
				}
				if got, _, err := (&Store{Path: s.Path}).Load(); err != nil || got.Claims[uid].State != PrepareStarted {
					t.Fatalf("intent %d not seen: %v %+v", i, err, got.Claims)
				}
				d.Claims[uid] = Claim{UID: uid, State: PrepareCompleted}
				if err := s.Save(d); err != nil {
					t.Fatal(err)
				}
				if replaced := inode(t, s.Path) != before; replaced != tt.wantReplace {
					t.Errorf("save %d replaced the file: %v, want %v", i, replaced, tt.wantReplace)
				}
				got, boot, err := (&Store{Path: s.Path}).Load()
				if err != nil || boot != "b" || !reflect.DeepEqual(got, d) {
					t.Fatalf("save %d: load = %+v %q %v, want %+v", i, got, boot, err, d)
				}
			}
		})
	}
}
