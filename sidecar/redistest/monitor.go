package redistest

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// ScriptKeys watches the server with MONITOR and records, for every key a Lua script touched,
// whether the script was given it in KEYS. Redis Cluster routes a script by its KEYS and ACL key
// rules are meant for them: a key a script builds from ARGV breaks both.
type ScriptKeys struct {
	conn net.Conn
	mu   sync.Mutex
	// undeclared lists "<command> <key>" of keys touched but not passed in KEYS.
	undeclared []string
	scripts    int
}

// keyFirst are the commands whose first argument is their only key.
var keyFirst = map[string]bool{
	"get": true, "set": true, "pexpire": true, "zadd": true, "zrem": true, "zremrangebyscore": true,
	"zremrangebyrank": true, "zcard": true, "zscore": true, "hmget": true, "hset": true, "hget": true,
	"hincrby": true, "hdel": true, "hgetall": true, "del": true, "getex": true, "expire": true,
}

// WatchScriptKeys starts watching the server at addr until the test ends.
func WatchScriptKeys(t testing.TB, addr string) *ScriptKeys {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(c)
	if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
		t.Fatalf("MONITOR: %q %v", l, err)
	}
	s := &ScriptKeys{conn: c}
	t.Cleanup(func() { c.Close() })
	go s.read(r)
	return s
}

func (s *ScriptKeys) read(r *bufio.Reader) {
	declared := map[string]bool{}
	for {
		l, err := r.ReadString('\n')
		if err != nil {
			return
		}
		args, lua := parseMonitor(strings.TrimSpace(strings.TrimPrefix(l, "+")))
		if len(args) == 0 {
			continue
		}
		cmd := strings.ToLower(args[0])
		s.mu.Lock()
		switch {
		case !lua && (cmd == "evalsha" || cmd == "eval") && len(args) >= 3:
			declared = map[string]bool{}
			n, _ := strconv.Atoi(args[2])
			for i := 0; i < n && 3+i < len(args); i++ {
				declared[args[3+i]] = true
			}
			s.scripts++
		case lua && keyFirst[cmd] && len(args) >= 2 && !declared[args[1]]:
			s.undeclared = append(s.undeclared, cmd+" "+args[1])
		}
		s.mu.Unlock()
	}
}

// Check waits for the monitor to see the last command sent (a PING marker) and fails the test
// for every undeclared key, or when no script ran at all.
func (s *ScriptKeys) Check(t testing.TB, ping func() error) {
	t.Helper()
	if err := ping(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // MONITOR lines trail the replies
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scripts == 0 {
		t.Fatal("MONITOR saw no script")
	}
	for _, u := range s.undeclared {
		t.Errorf("a script touched a key not passed in KEYS: %s", u)
	}
}

// parseMonitor splits a MONITOR line (`<ts> [<db> <client>] "arg" "arg"...`) into its arguments
// and whether a script ran the command.
func parseMonitor(l string) (args []string, lua bool) {
	i := strings.Index(l, "] ")
	if i < 0 {
		return nil, false
	}
	lua = strings.HasSuffix(l[:i], " lua")
	rest := l[i+2:]
	for len(rest) > 0 {
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return nil, false
		}
		a, err := strconv.Unquote(q)
		if err != nil {
			return nil, false
		}
		args = append(args, a)
		rest = strings.TrimLeft(rest[len(q):], " ")
	}
	return args, lua
}

// String describes what was seen.
func (s *ScriptKeys) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("%d scripts, undeclared keys %v", s.scripts, s.undeclared)
}
