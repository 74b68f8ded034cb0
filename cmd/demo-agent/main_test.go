package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLoadWeights(t *testing.T) {
	p := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(p, make([]byte, 3<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	n, _, err := loadWeights(p)
	if err != nil || n != 3<<20 {
		t.Fatalf("loadWeights = %d, %v", n, err)
	}
	if _, _, err := loadWeights(p + ".missing"); err == nil {
		t.Fatal("missing weights loaded")
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"--listen=:9000", "--max-running=8", "--token-rate=200", "--ttft-base=20ms",
		"--kv-cache-tokens=1000", "--block-size=32", "--fail-rate=0.25", "--fail-mode=midstream", "--tool-calls"})
	if err != nil {
		t.Fatal(err)
	}
	if o.eng.Slots != 8 || o.eng.DecodeRate != 200 || o.eng.FirstTokenOverhead != 20*time.Millisecond ||
		o.eng.Blocks != 31 || o.eng.BlockSize != 32 || !o.eng.PrefixCaching {
		t.Errorf("engine config %+v", o.eng)
	}
	if o.srv.FailRate != 0.25 || o.srv.FailMode != "midstream" || !o.srv.ToolCalls || o.srv.DefaultMaxTokens != 16 {
		t.Errorf("server config %+v", o.srv)
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--fail-mode=sometimes"}, "--fail-mode"},
		{[]string{"--fail-rate=2"}, "--fail-rate"},
		{[]string{"--max-running=0"}, "--max-running"},
		{[]string{"--block-size=0"}, "--block-size"},
		{[]string{"--kv-cache-tokens=8"}, "--kv-cache-tokens"},
		{[]string{"--prefill-rate=0"}, "--prefill-rate"},
		{[]string{"--token-rate=-1"}, "--token-rate"},
		{[]string{"--ttft-base=-1s"}, "--ttft-base"},
		{[]string{"--default-max-tokens=0"}, "--default-max-tokens"},
		{[]string{"--max-body-bytes=0"}, "--max-body-bytes"},
		{[]string{"--embedding-dim=0"}, "--embedding-dim"},
	}
	for _, tt := range tests {
		_, err := parseFlags(tt.args)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: err = %v, want it to name %q", tt.args, err, tt.want)
		}
	}
}

func TestParseFlagsState(t *testing.T) {
	o, err := parseFlags([]string{"--state-bytes=1048576", "--state-seed=7"})
	if err != nil || o.stateBytes != 1<<20 || o.stateSeed != 7 {
		t.Fatalf("parseFlags = %+v, %v", o, err)
	}
	if _, err := parseFlags([]string{"--state-bytes=-1"}); err == nil || !strings.Contains(err.Error(), "--state-bytes") {
		t.Fatalf("negative --state-bytes: %v", err)
	}
}
