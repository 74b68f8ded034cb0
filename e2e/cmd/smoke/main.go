// Command smoke is the foundation e2e's smoke image: it prints a greeting
// with the environment variables a test asks about, then sleeps until
// terminated.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	fmt.Println("neuronetes smoke pod running")
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SMOKE_") || strings.HasPrefix(kv, "NVIDIA_") || strings.HasPrefix(kv, "NEURONETES_") {
			fmt.Println(kv)
		}
	}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, syscall.SIGINT)
	<-ch
}
