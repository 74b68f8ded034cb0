package helm_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// redisBytes parses a Redis memory size (768mb, 2gb, 1048576).
func redisBytes(t *testing.T, s string) int64 {
	t.Helper()
	m := regexp.MustCompile(`^([0-9]+)(b|kb|mb|gb|k|m|g)?$`).FindStringSubmatch(strings.ToLower(s))
	if m == nil {
		t.Fatalf("maxmemory %q: not a Redis size", s)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	unit := map[string]int64{"": 1, "b": 1, "k": 1000, "kb": 1 << 10, "m": 1000 * 1000, "mb": 1 << 20, "g": 1000 * 1000 * 1000, "gb": 1 << 30}[m[2]]
	return n * unit
}

// TestChartRedisConfig renders the bundled Redis: it runs with the chart's
// files/redis.conf (the file the sidecar's fault test uses) from a ConfigMap,
// which fsyncs every write and never evicts, and a maxmemory under its
// memory limit with headroom.
func TestChartRedisConfig(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(chartDir(t), "files", "redis.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"appendfsync always", "maxmemory-policy noeviction", "appendonly yes"} {
		if !regexp.MustCompile(`(?m)^` + line + `$`).Match(want) {
			t.Errorf("files/redis.conf lacks %q", line)
		}
	}
	objs, err := render(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cm := find(objs, "ConfigMap", "nn-neuronetes-redis")
	if got, _ := get(cm, "data", "redis.conf").(string); strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
		t.Fatalf("ConfigMap redis.conf differs from files/redis.conf:\n%s", got)
	}
	sts := find(objs, "StatefulSet", "nn-neuronetes-redis")
	c := container(sts, "redis")
	a := args(c)
	if len(a) == 0 || a[0] != "/etc/redis/redis.conf" {
		t.Fatalf("redis args %v: the config file must come first", a)
	}
	if !strings.Contains(toJSON(get(sts, "spec", "template", "spec", "volumes")), `"configMap":{"name":"nn-neuronetes-redis"}`) {
		t.Errorf("volumes %s lack the config ConfigMap", toJSON(get(sts, "spec", "template", "spec", "volumes")))
	}
	var maxmemory string
	for i, v := range a {
		if v == "--maxmemory" && i+1 < len(a) {
			maxmemory = a[i+1]
		}
	}
	limit := resource.MustParse(get(c, "resources", "limits", "memory").(string))
	if mm := redisBytes(t, maxmemory); mm <= 0 || float64(mm) > 0.8*float64(limit.Value()) {
		t.Errorf("maxmemory %s (%d bytes) is not within 80%% of the memory limit %s", maxmemory, mm, limit.String())
	}
}

// TestChartRedisClients renders the gateway's and the dispatcher's Redis
// client settings: on the bundled Redis each is its generated ACL user with
// the password from <fullname>-redis-users; on your Redis the user and
// password Secret of the values, and the shared TLS CA mounted as
// --redis-ca-file; without users there, none of it.
func TestChartRedisClients(t *testing.T) {
	external := `redis={"bundled":{"enabled":false},"address":"redis.internal:6379"}`
	set := []string{external,
		`redis.tls={"enabled":true,"caSecret":{"name":"redis-ca","key":"ca.pem"},"serverName":"redis.internal"}`,
		`gateway.redis.username="gateway"`, `gateway.redis.passwordSecret={"name":"gw-redis","key":"password"}`,
		`dispatcher.redis.username="dispatcher"`, `dispatcher.redis.passwordSecret={"name":"d-redis","key":"pw"}`,
	}
	bundled := map[string][]string{"gateway": {"neuronetes-gateway", "nn-neuronetes-redis-users"}, "dispatcher": {"neuronetes-dispatcher", "nn-neuronetes-redis-users"}}
	for _, tc := range []struct {
		name string
		set  []string
		want map[string][]string // container -> user, password Secret
		tls  bool
	}{
		{"bundled", nil, bundled, false},
		{"external without users", []string{external}, nil, false},
		{"users and TLS", set, map[string][]string{"gateway": {"gateway", "gw-redis"}, "dispatcher": {"dispatcher", "d-redis"}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, nil, tc.set)
			if err != nil {
				t.Fatal(err)
			}
			for _, comp := range []string{"gateway", "dispatcher"} {
				dep := find(objs, "Deployment", "nn-neuronetes-"+comp)
				c := container(dep, comp)
				a, env, vols := args(c), toJSON(get(c, "env")), toJSON(get(dep, "spec", "template", "spec", "volumes"))
				w := tc.want[comp]
				for _, arg := range a {
					if (w == nil && strings.HasPrefix(arg, "--redis-username")) || (!tc.tls && (strings.HasPrefix(arg, "--redis-tls") || strings.HasPrefix(arg, "--redis-ca-file"))) {
						t.Errorf("%s: args carry %s", comp, arg)
					}
				}
				if w == nil {
					if strings.Contains(env, "NEURONETES_REDIS_PASSWORD") || strings.Contains(vols, "redis-ca") {
						t.Errorf("%s: env %s / volumes %s carry Redis credentials", comp, env, vols)
					}
					continue
				}
				if !contains(a, "--redis-username="+w[0]) {
					t.Errorf("%s: args %v lack --redis-username=%s", comp, a, w[0])
				}
				if !strings.Contains(env, `"name":"NEURONETES_REDIS_PASSWORD","valueFrom":{"secretKeyRef":{"key":`) || !strings.Contains(env, `"name":"`+w[1]+`"`) {
					t.Errorf("%s: env %s lacks the password from Secret %s", comp, env, w[1])
				}
				if !tc.tls {
					continue
				}
				for _, arg := range []string{"--redis-tls", "--redis-ca-file=/etc/neuronetes/redis-ca/ca.pem", "--redis-server-name=redis.internal"} {
					if !contains(a, arg) {
						t.Errorf("%s: args %v lack %s", comp, a, arg)
					}
				}
				if !strings.Contains(vols, `"secret":{"secretName":"redis-ca"}`) || !strings.Contains(toJSON(get(c, "volumeMounts")), `"mountPath":"/etc/neuronetes/redis-ca"`) {
					t.Errorf("%s: the CA Secret is not mounted: volumes %s", comp, vols)
				}
			}
		})
	}
}
