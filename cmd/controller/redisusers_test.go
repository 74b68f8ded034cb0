package main

import (
	"strings"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/internal/redisconn"
)

// TestRedisUserOptionsValidate refuses --sidecar-redis-users without the Secret or address it
// needs, a period that is not positive and inconsistent redisconn flags, naming the flags.
func TestRedisUserOptionsValidate(t *testing.T) {
	base := options{sidecarRedis: "r:6379", sidecarRedisSecret: "neuronetes-sidecar-redis"}
	for _, tc := range []struct {
		name    string
		r       redisUserOptions
		o       options
		wantErr string
	}{
		{"off", redisUserOptions{}, options{}, ""},
		{"managed", redisUserOptions{manage: true, period: time.Second}, base, ""},
		{"no Secret", redisUserOptions{manage: true, period: time.Second}, options{sidecarRedis: "r:6379"}, "--sidecar-redis-secret"},
		{"zero period", redisUserOptions{manage: true}, base, "--sidecar-redis-users-period"},
		{"CA without TLS", redisUserOptions{conn: redisconn.Flags{CAFile: "/ca"}}, base, "--redis-tls"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.r.validate(&tc.o)
			if (tc.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("validate = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
