package helm_test

import (
	"strings"
	"testing"
)

// TestChartProductionRefusals: with profile=production, `helm install` fails on what is unsafe in
// production, and the message names the value to change.
func TestChartProductionRefusals(t *testing.T) {
	prod := []string{"values/production-example.yaml"}
	cases := []struct {
		name string
		set  []string
		want string
	}{
		{"gateway without auth", []string{`gateway.auth="none"`, `gateway.anonymousNamespace="demo"`}, "gateway.auth=none lets"},
		{"quotas failing open", []string{`gateway.quotaStoreFailure="open"`}, "gateway.quotaStoreFailure=open"},
		{"plain-HTTP model S3", []string{`nodeagent.s3Endpoint="http://minio.example.com:9000"`}, "nodeagent.s3Endpoint=http://"},
		{"plain-HTTP checkpoint S3", []string{`nodeagent={"checkpoint":{"enabled":true,"s3":{"endpoint":"s3.example.com:443","secure":false,"credentialsSecret":"s3"}}}`}, "nodeagent.checkpoint.s3.secure=false"},
		{"bundled Redis (no TLS, no replica)", []string{`redis.bundled.enabled=true`, `gateway.redis.passwordSecret.name=""`, `dispatcher.redis.passwordSecret.name=""`}, "redis.bundled.enabled=true runs one Redis without TLS"},
		{"one controller replica", []string{`controller.replicas=1`}, "controller.replicas < 2"},
		{"controller without PDB", []string{`controller.pdb={"enabled":false}`}, "controller.pdb.enabled=false"},
		{"NetworkPolicies off", []string{`networkPolicy.enabled=false`}, "networkPolicy.enabled=false"},
		{"gateway Redis without credentials", []string{`gateway.redis.passwordSecret.name=""`}, "gateway.redis.passwordSecret.name is empty"},
		{"dispatcher Redis without credentials", []string{`dispatcher.redis.passwordSecret.name=""`}, "dispatcher.redis.passwordSecret.name is empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := render(t, prod, tc.set); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want a refusal naming %q, got %v", tc.want, err)
			}
			// The same values pass outside production: the refusal is the profile's.
			if _, err := render(t, prod, append(tc.set, `profile="development"`)); err != nil {
				t.Fatalf("profile=development: %v", err)
			}
		})
	}
	// What production accepts.
	for _, set := range [][]string{
		{`nodeagent.s3Endpoint="https://s3.example.com"`},
		{`nodeagent={"checkpoint":{"enabled":true,"s3":{"endpoint":"s3.example.com:443","secure":true,"credentialsSecret":"s3"}}}`},
		{`gateway.enabled=false`, `gateway.auth="none"`},
	} {
		if _, err := render(t, prod, set); err != nil {
			t.Errorf("production with %v: %v", set, err)
		}
	}
}

// TestChartWebhookAvailability: the production example runs two controllers behind a
// PodDisruptionBudget on different nodes, and no set sends the system namespaces' pods to the
// fail-closed webhook.
func TestChartWebhookAvailability(t *testing.T) {
	objs, err := render(t, []string{"values/production-example.yaml"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dep := find(objs, "Deployment", "nn-neuronetes-controller")
	if r, _ := get(dep, "spec", "replicas").(float64); r < 2 {
		t.Errorf("production controller replicas = %v, want >= 2", get(dep, "spec", "replicas"))
	}
	pdb := find(objs, "PodDisruptionBudget", "nn-neuronetes-controller")
	if pdb == nil {
		t.Fatal("production example renders no controller PodDisruptionBudget")
	}
	if get(pdb, "spec", "selector", "matchLabels", "app.kubernetes.io/component") != "controller" || get(pdb, "spec", "maxUnavailable") != float64(1) {
		t.Errorf("controller PDB spec %v", get(pdb, "spec"))
	}
	if get(dep, "spec", "template", "spec", "affinity", "podAntiAffinity") == nil {
		t.Error("controller replicas do not prefer different nodes")
	}
	// One replica: a PDB would protect nothing (maxUnavailable 1) or block every drain.
	if objs, err := render(t, nil, nil); err != nil {
		t.Fatal(err)
	} else if find(objs, "PodDisruptionBudget", "nn-neuronetes-controller") != nil {
		t.Error("one controller replica renders a PodDisruptionBudget")
	}
	for _, vs := range valueSets {
		t.Run(vs.name, func(t *testing.T) {
			objs, err := render(t, vs.files, vs.set, vs.extra...)
			if err != nil {
				t.Fatal(err)
			}
			mwc := find(objs, "MutatingWebhookConfiguration", "neuronetes-sidecar-injector")
			if mwc == nil {
				return
			}
			for i := range mwc["webhooks"].([]any) {
				exprs, _ := get(mwc, "webhooks", i, "namespaceSelector", "matchExpressions").([]any)
				var excluded []string
				for _, e := range exprs {
					if get(e, "key") == "kubernetes.io/metadata.name" && get(e, "operator") == "NotIn" {
						for _, v := range get(e, "values").([]any) {
							excluded = append(excluded, v.(string))
						}
					}
				}
				for _, ns := range []string{"kube-system", "kube-public", "kube-node-lease"} {
					if !contains(excluded, ns) {
						t.Errorf("webhook %v does not exclude namespace %s (namespaceSelector %v)", get(mwc, "webhooks", i, "name"), ns, get(mwc, "webhooks", i, "namespaceSelector"))
					}
				}
			}
		})
	}
}
