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
