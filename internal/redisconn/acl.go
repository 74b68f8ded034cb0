package redisconn

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Session are the ACL rules every NeuroNetes Redis user needs to open and
// keep a connection: HELLO and AUTH (go-redis' handshake), PING, CLIENT
// SETNAME and SELECT. go-redis ignores a refused CLIENT SETINFO, which Redis
// 7.0 does not know.
var Session = []string{"+hello", "+auth", "+ping", "+client|setname", "+select"}

// Rules joins the ACL rules of a user that may touch only keys matching
// keyPatterns (Redis glob patterns), publish or subscribe on no channel, and
// send only commands (each "+<command>" or "+<command>|<subcommand>") and
// Session. The result starts with resetkeys, resetchannels and nocommands, so
// applying it to an existing user replaces every earlier right.
func Rules(keyPatterns []string, commands ...string) []string {
	return ChannelRules(keyPatterns, nil, commands...)
}

// ChannelRules is Rules for a user that may also publish and subscribe on
// the channels matching channelPatterns.
func ChannelRules(keyPatterns, channelPatterns []string, commands ...string) []string {
	out := []string{"resetkeys"}
	for _, p := range keyPatterns {
		out = append(out, "~"+p)
	}
	out = append(out, "resetchannels")
	for _, p := range channelPatterns {
		out = append(out, "&"+p)
	}
	out = append(out, "nocommands")
	out = append(out, Session...)
	return append(out, commands...)
}

// SetUser creates or replaces the ACL user name with password pw and rules
// (ACL SETUSER name reset on >pw rules...): one command, so a client never
// sees the user half configured. Connections already authenticated as name
// keep their session and get the new rights at their next command.
func SetUser(ctx context.Context, c redis.UniversalClient, name, pw string, rules []string) error {
	args := make([]any, 0, len(rules)+6)
	args = append(args, "ACL", "SETUSER", name, "reset", "on", ">"+pw)
	for _, r := range rules {
		args = append(args, r)
	}
	if err := c.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("ACL SETUSER %s: %w", name, err)
	}
	return nil
}

// ACLFileLine is the aclfile line of user name with password pw and rules
// ("user <name> on ><pw> <rules...>"), as the chart writes them for its
// bundled Redis.
func ACLFileLine(name, pw string, rules []string) string {
	return strings.Join(append([]string{"user", name, "on", ">" + pw}, rules...), " ")
}
