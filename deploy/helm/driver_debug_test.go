package helm_test

import (
	"strings"
	"testing"
)

// TestChartDriverDebug renders driver.debug: off by default (no debug flag, no token volume);
// enabled, the driver binds it on loopback and reads its token from the named Secret; enabled
// without a Secret is refused.
func TestChartDriverDebug(t *testing.T) {
	for _, tc := range []struct {
		name     string
		set      string
		wantArgs []string
		wantErr  string
	}{
		{name: "default off", set: `driver={"nvml":"mock:dgxa100"}`},
		{name: "enabled", set: `driver={"nvml":"mock:dgxa100","debug":{"enabled":true,"port":9412,"tokenSecret":"drv-debug"}}`,
			wantArgs: []string{"--debug-addr=127.0.0.1:9412", "--debug-token-file=/etc/neuronetes/driver-debug/token"}},
		{name: "enabled without a token Secret", set: `driver={"nvml":"mock:dgxa100","debug":{"enabled":true}}`,
			wantErr: "driver.debug.tokenSecret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, []string{"values/local.yaml"}, []string{tc.set})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("render error %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ds := find(objs, "DaemonSet", "nn-neuronetes-driver")
			a := args(container(ds, "driver"))
			for _, want := range tc.wantArgs {
				if !contains(a, want) {
					t.Errorf("driver args %v lack %s", a, want)
				}
			}
			var debugArgs []string
			for _, s := range a {
				if strings.HasPrefix(s, "--debug-") {
					debugArgs = append(debugArgs, s)
				}
			}
			if len(debugArgs) != len(tc.wantArgs) {
				t.Errorf("driver debug args %v, want %v", debugArgs, tc.wantArgs)
			}
			secret := ""
			vols, _ := get(ds, "spec", "template", "spec", "volumes").([]any)
			for _, v := range vols {
				if s, ok := get(v, "secret", "secretName").(string); ok && get(v, "name") == "driver-debug-token" {
					secret = s
				}
			}
			if want := map[bool]string{true: "drv-debug", false: ""}[len(tc.wantArgs) > 0]; secret != want {
				t.Errorf("debug token volume from Secret %q, want %q", secret, want)
			}
		})
	}
}
