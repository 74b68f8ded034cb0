package checkpoint

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/neuronetes/neuronetes/driver/model"
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
		c.Devices[0].Env = []string{"NEURONETES_GPU_TIMESLICE=5ms"}
		d.Claims["uid-1"] = c
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
		t.Skip("no /proc/sys/kernel/random/boot_id")
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
