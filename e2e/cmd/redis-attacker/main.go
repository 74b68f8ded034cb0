// Command redis-attacker is the image of TestAttackRedisForeignNamespaceKeys: run in a tenant's
// pod, it sends Redis commands first without credentials, then as the user of
// $NEURONETES_REDIS_USERNAME / $NEURONETES_REDIS_PASSWORD (its own namespace's sidecar user), and
// prints one JSON line per command with the reply or the error. It always exits 0 once every line
// is printed; the test judges the replies.
//
//	redis-attacker -addr host:port -victim-key KEY
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

// Result is one command's outcome.
type Result struct {
	// As is "anonymous" or "own-user".
	As string `json:"as"`
	// Cmd is the command sent.
	Cmd []any `json:"cmd"`
	// Reply is the reply as text; Err the error ("" when it succeeded).
	Reply string `json:"reply,omitempty"`
	Err   string `json:"err,omitempty"`
}

func main() {
	addr := flag.String("addr", "", "Redis host:port")
	victim := flag.String("victim-key", "", "a key of the victim namespace's session")
	own := flag.String("own-key", "", "a key of the attacker's own namespace")
	flag.Parse()
	ctx := context.Background()
	run := func(as string, c *redis.Client, cmds ...[]any) {
		for _, cmd := range cmds {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			v, err := c.Do(cctx, cmd...).Result()
			cancel()
			r := Result{As: as, Cmd: cmd, Reply: fmt.Sprint(v)}
			if err != nil {
				r.Reply, r.Err = "", err.Error()
			}
			b, _ := json.Marshal(r)
			fmt.Println(string(b))
		}
	}
	attacks := [][]any{
		{"HGETALL", *victim}, {"HMGET", *victim, "d"}, {"HSET", *victim, "d", "forged"}, {"DEL", *victim},
		{"FLUSHALL"}, {"KEYS", "*"}, {"CONFIG", "SET", "appendonly", "no"},
	}
	anon := redis.NewClient(&redis.Options{Addr: *addr, MaxRetries: -1, DialTimeout: 5 * time.Second})
	run("anonymous", anon, attacks...)
	anon.Close()
	user := redis.NewClient(&redis.Options{Addr: *addr, MaxRetries: -1, DialTimeout: 5 * time.Second,
		Username: os.Getenv("NEURONETES_REDIS_USERNAME"), Password: os.Getenv("NEURONETES_REDIS_PASSWORD")})
	run("own-user", user, append([][]any{{"SET", *own, "mine"}}, attacks...)...)
	user.Close()
}
