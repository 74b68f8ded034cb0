// Command coredns is CoreDNS with only the plugins the local cluster's
// Corefile (e2e/cluster/dns.go) uses: kubernetes for cluster.local, forward
// for every other name, and bind, ready, errors, cache and loop. It lives in
// the Kubernetes tool module so that client-go and its dependencies compile
// once for both.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
)

// directives are the compiled-in plugins in CoreDNS's execution order (the
// order of core/dnsserver/zdirectives.go); a Corefile may use only these.
var directives = []string{"bind", "ready", "errors", "cache", "kubernetes", "loop", "forward"}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
