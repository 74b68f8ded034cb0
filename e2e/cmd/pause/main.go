// Command pause is the sandbox ("pause") image of the local cluster: it
// holds a pod's namespaces open and exits on SIGTERM or SIGINT.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	// Reap children adopted by this pid-namespace init.
	signal.Ignore(syscall.SIGCHLD)
	<-ch
}
