package helm_test

import (
	"encoding/base64"
	"testing"
)

// TestChartCheckpointSigningTLSAndAdmission: with checkpointing on, the node agent mounts a
// signing key Secret (generated, or the one named) that no other workload mounts, talks https to
// S3 unless told otherwise, and the restore-source admission policy is installed; with
// checkpointing off none of it is rendered.
func TestChartCheckpointSigningTLSAndAdmission(t *testing.T) {
	tests := []struct {
		name       string
		set        []string
		on         bool
		secretName string // the Secret the node agent mounts
		generated  bool   // the chart renders that Secret
		s3Flag     string // the --checkpoint-s3-secure flag, "" when no S3
	}{
		{name: "off", set: nil},
		{name: "dir store", set: []string{`nodeagent={"checkpoint":{"enabled":true}}`}, on: true, secretName: "nn-neuronetes-checkpoint-signing", generated: true},
		{name: "s3 default tls", set: []string{`nodeagent={"checkpoint":{"enabled":true,"s3":{"endpoint":"s3.example:443"}}}`}, on: true,
			secretName: "nn-neuronetes-checkpoint-signing", generated: true, s3Flag: "--checkpoint-s3-secure=true"},
		{name: "s3 plain http, own key", set: []string{`nodeagent={"checkpoint":{"enabled":true,"signingKeySecret":"my-key","s3":{"endpoint":"10.0.0.1:9000","secure":false}}}`}, on: true,
			secretName: "my-key", s3Flag: "--checkpoint-s3-secure=false"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			ds := find(objs, "DaemonSet", "nn-neuronetes-nodeagent")
			if ds == nil {
				t.Fatal("no node DaemonSet")
			}
			na := args(container(ds, "nodeagent"))
			if got := contains(na, "--checkpoint-signing-key-file=/etc/neuronetes/checkpoint-signing/key"); got != tc.on {
				t.Errorf("signing key flag present=%v, want %v (%v)", got, tc.on, na)
			}
			for _, flag := range []string{"--checkpoint-s3-secure=true", "--checkpoint-s3-secure=false"} {
				if contains(na, flag) != (flag == tc.s3Flag) {
					t.Errorf("args %v: want s3 flag %q", na, tc.s3Flag)
				}
			}
			mounted, podsDir := "", ""
			for _, v := range get(ds, "spec", "template", "spec", "volumes").([]any) {
				vm := v.(map[string]any)
				if vm["name"] == "checkpoint-signing" {
					mounted, _ = get(vm, "secret", "secretName").(string)
				}
				if vm["name"] == "kubelet-pods" {
					podsDir, _ = get(vm, "hostPath", "path").(string)
				}
			}
			// The session workspace (docs/checkpoint.md, "Workspace"): the pods' volumes at the
			// node's path, only with checkpointing.
			if want := map[bool]string{true: "/var/lib/kubelet/pods"}[tc.on]; podsDir != want {
				t.Errorf("kubelet pods hostPath %q, want %q", podsDir, want)
			}
			if tc.on {
				found := false
				for _, m := range get(container(ds, "nodeagent"), "volumeMounts").([]any) {
					mm := m.(map[string]any)
					found = found || mm["name"] == "kubelet-pods" && mm["mountPath"] == "/var/lib/kubelet/pods" && mm["mountPropagation"] == "HostToContainer"
				}
				if !found {
					t.Error("the node agent does not mount the kubelet's pods dir at its own path (HostToContainer)")
				}
			}
			if mounted != tc.secretName {
				t.Errorf("signing Secret volume %q, want %q", mounted, tc.secretName)
			}
			sec := find(objs, "Secret", "nn-neuronetes-checkpoint-signing")
			if (sec != nil) != tc.generated {
				t.Fatalf("generated signing Secret rendered=%v, want %v", sec != nil, tc.generated)
			}
			if sec != nil {
				raw, _ := base64.StdEncoding.DecodeString(get(sec, "data", "key").(string))
				if len(raw) < 32 {
					t.Errorf("generated key is %d bytes, want >= 32", len(raw))
				}
			}
			for _, o := range objs {
				if o.kind() != "Deployment" {
					continue
				}
				vols, _ := get(o, "spec", "template", "spec", "volumes").([]any)
				for _, v := range vols {
					if get(v, "secret", "secretName") == tc.secretName && tc.secretName != "" {
						t.Errorf("Deployment %s mounts the checkpoint signing key", o.name())
					}
				}
			}
			pol := find(objs, "ValidatingAdmissionPolicy", "nn-neuronetes-checkpoint-restore-source")
			bind := find(objs, "ValidatingAdmissionPolicyBinding", "nn-neuronetes-checkpoint-restore-source")
			if (pol != nil) != tc.on || (bind != nil) != tc.on {
				t.Fatalf("restore-source policy rendered=%v binding=%v, want %v", pol != nil, bind != nil, tc.on)
			}
			if bind != nil && get(bind, "spec", "policyName") != "nn-neuronetes-checkpoint-restore-source" {
				t.Errorf("binding names policy %v", get(bind, "spec", "policyName"))
			}
		})
	}
}
