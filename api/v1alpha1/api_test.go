package v1alpha1

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func TestWarmNodeLabel(t *testing.T) {
	hex := strings.Repeat("ab", 32)
	tests := []struct {
		name, digest, want string
	}{
		{"full digest", "sha256:" + hex, WarmLabelPrefix + "sha256-" + hex[:56]},
		{"upper case", "sha256:" + strings.ToUpper(hex), WarmLabelPrefix + "sha256-" + hex[:56]},
		{"bare hex", hex, WarmLabelPrefix + "sha256-" + hex[:56]},
		{"short", "sha256:abc", WarmLabelPrefix + "sha256-abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := WarmNodeLabel(tt.digest)
			if got != tt.want {
				t.Fatalf("WarmNodeLabel(%q) = %q, want %q", tt.digest, got, tt.want)
			}
			if name := strings.TrimPrefix(got, WarmLabelPrefix); len(name) > 63 {
				t.Fatalf("label name %q longer than 63", name)
			}
		})
	}
}

func TestDurationParse(t *testing.T) {
	tests := []struct {
		in      Duration
		want    time.Duration
		wantErr bool
	}{
		{"500ms", 500 * time.Millisecond, false},
		{"30s", 30 * time.Second, false},
		{"1m30s", 90 * time.Second, false},
		{"7d", 7 * 24 * time.Hour, false},
		{"1d12h", 36 * time.Hour, false},
		{"1.5d", 36 * time.Hour, false},
		{"", 0, true},
		{"abc", 0, true},
		{"-5s", 0, true},
		{"5dx", 0, true},
	}
	for _, tt := range tests {
		t.Run(string(tt.in), func(t *testing.T) {
			got, err := tt.in.Parse()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse(%q) err = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("Parse(%q) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestDecimalJSON(t *testing.T) {
	tests := []struct {
		in      string
		want    float64
		out     string
		wantErr bool
	}{
		{`99.5`, 99.5, `99.5`, false},
		{`"0.7"`, 0.7, `0.7`, false},
		{`100`, 100, `100`, false},
		{`"x"`, 0, ``, true},
		{`true`, 0, ``, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var d Decimal
			err := d.UnmarshalJSON([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("UnmarshalJSON(%s) err = %v", tt.in, err)
			}
			if tt.wantErr {
				return
			}
			f, _ := d.Float64()
			if f != tt.want {
				t.Fatalf("Float64 = %v, want %v", f, tt.want)
			}
			b, err := d.MarshalJSON()
			if err != nil || string(b) != tt.out {
				t.Fatalf("MarshalJSON = %s, %v; want %s", b, err, tt.out)
			}
		})
	}
}

// TestSeedFixturesDecodeStrictly checks that every seed 001 example maps onto a Go field: a field
// the types lack would fail strict decoding. The CRD-level acceptance runs in e2e against a real
// apiserver.
func TestSeedFixturesDecodeStrictly(t *testing.T) {
	files, err := filepath.Glob("testdata/seed001/*.yaml")
	if err != nil || len(files) < 20 {
		t.Fatalf("want >= 20 seed fixtures, got %d (%v)", len(files), err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var meta struct {
				Kind string `json:"kind"`
			}
			if err := yaml.Unmarshal(b, &meta); err != nil {
				t.Fatal(err)
			}
			var obj any
			switch meta.Kind {
			case "AgentPool":
				obj = &AgentPool{}
			case "AgentClass":
				obj = &AgentClass{}
			case "ToolBinding":
				obj = &ToolBinding{}
			case "Model":
				obj = &Model{}
			default:
				t.Fatalf("unknown kind %q", meta.Kind)
			}
			if err := yaml.UnmarshalStrict(b, obj); err != nil {
				t.Fatalf("strict decode: %v", err)
			}
		})
	}
}

func TestSeedWarmPoolFixtureValues(t *testing.T) {
	b, err := os.ReadFile("testdata/seed001/10-warm-pool.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var p AgentPool
	if err := yaml.UnmarshalStrict(b, &p); err != nil {
		t.Fatal(err)
	}
	as := p.Spec.Autoscaling
	if *p.Spec.PrewarmPercent != 20 || *p.Spec.MaxReplicas != 50 || !*as.UseWarmPool ||
		as.ReplenishStrategy.Delay.DurationOr(0) != 30*time.Second || *as.ReplenishStrategy.BatchSize != 2 {
		t.Fatalf("unexpected decode: %+v", p.Spec)
	}
}
